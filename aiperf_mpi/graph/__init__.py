"""Models as NetworkX graphs: validation, shapes, JSON, seeds and the op counter.

Nothing in this package imports TensorFlow or MPI: the search runs on CPUs of
nodes that may not even have TensorFlow loaded yet, and the counter must not
depend on how any framework executes a layer.
"""

from aiperf_mpi.graph.model import (
    LAYER_TYPES,
    GraphBuilder,
    GraphError,
    Shape,
    from_json,
    graphs_equal,
    infer_shapes,
    inputs_of,
    output_node,
    param_counts,
    param_shapes,
    to_json,
    total_params,
    with_kernel_size,
)

__all__ = [
    "LAYER_TYPES",
    "GraphBuilder",
    "GraphError",
    "Shape",
    "from_json",
    "graphs_equal",
    "infer_shapes",
    "inputs_of",
    "output_node",
    "param_counts",
    "param_shapes",
    "to_json",
    "total_params",
    "with_kernel_size",
]
