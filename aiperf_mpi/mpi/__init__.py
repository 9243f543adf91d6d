"""The MPI side: process layout, the abort guard, Horovod on sub-communicators.

Everything here takes the communicator as an argument; nothing keeps MPI state
at module level.
"""
