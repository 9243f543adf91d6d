"""Architecture search: history, distance between architectures, GP-guided morphing.

No MPI and no TensorFlow here: the search runs on a group leader's CPU and is
driven in tests through ``ask()``/``tell()`` alone.
"""
