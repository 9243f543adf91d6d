"""The TensorFlow side: Keras models from graphs, and (later) the trainer.

Uses Keras 3, the Keras that TensorFlow 2.18 ships.  tf_keras (Keras 2) would
be needed only for Horovod's Keras callbacks, which this package does not use:
Horovod's ``DistributedOptimizer`` silently fails to average gradients with
Keras 3, so training runs a custom loop with Horovod's all-reduce instead.
"""
