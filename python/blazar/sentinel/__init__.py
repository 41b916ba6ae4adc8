"""The sentinel: warn-only judgement of a finished answer against what its request asked (``judge``)."""
