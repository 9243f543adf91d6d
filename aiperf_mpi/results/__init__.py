"""What a run leaves behind, as a contract: the event log, its schema, and the score computed from it.

The writer (the master), the readers (``--resume``, the score, ``analysis/``)
and other people's tools share these modules; nothing here imports MPI or
TensorFlow.
"""
