"""Search over vectors, model-agnostic: whatever encoder made the vectors (an encoder is a callable from texts to
``[n, d]`` vectors), this package ranks them. It imports no model code.

:mod:`.dense`: exact dense search in bounded memory (:func:`~.dense.search`, :func:`~.dense.retrieve`);
:mod:`.similarity`: the similarity functions they rank by.
"""
