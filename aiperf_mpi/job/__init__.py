"""The benchmark as one MPI job: the master's scheduler, the leaders' loop, transports."""
