"""How an engine child is launched: the spec (``spec``), a model's settings and memory fit (``settings``), and one
compiler module per lane (``llama_cpp``, ``mistralrs``, ``sglang``, ``mlx``, ``whisper``) behind the protocol and
table in ``compilers``. Each lane's flags come from its builder in ``engines/argv.py``; what its engine can do is
the ``Capabilities`` its compiler sets.
"""
