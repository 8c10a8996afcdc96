"""The project's verl extensions (used at both scales) and, in ``cpu``, the CPU platform (tiny scale).

``plugin`` is what verl imports in each of its processes; ``main`` is the entry point of every run.
"""
