"""Record classes for the modules every enzcc run imports.

A drop-in compile is one clang run plus enzcc's own start-up, which projects pay once per source file.
:mod:`dataclasses` cost about 16 ms of that start-up (importing it pulls in :mod:`inspect`, and each class
is made by compiling generated methods); :func:`record` gives those classes the same constructor (fields in
annotation order, defaults, :func:`factory` for mutable defaults), ``repr``, field-wise ``==`` and, with
``frozen=True``, immutability and a hash, without either cost. Modules that only AD loads keep dataclasses.
"""

from __future__ import annotations


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make):
        self.make = make


def factory(make) -> _Factory:
    """A default made anew for each record (``factory(list)``), as dataclasses' ``default_factory``."""
    return _Factory(make)


def record(cls=None, *, frozen: bool = False):
    """Class decorator: the annotated class attributes are the record's fields (see the module's text)."""
    def wrap(cls):
        names = tuple(cls.__dict__.get("__annotations__", {}))
        defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
        for n, d in defaults.items():
            if isinstance(d, _Factory):
                delattr(cls, n)
        name = cls.__name__

        def __init__(self, *args, **kwargs):
            if len(args) > len(names):
                raise TypeError(f"{name}() takes {len(names)} arguments but {len(args)} were given")
            values = dict(zip(names, args))
            for k, v in kwargs.items():
                if k not in names or k in values:
                    raise TypeError(f"{name}() got an unexpected or repeated argument '{k}'")
                values[k] = v
            for n in names:
                if n not in values:
                    if n not in defaults:
                        raise TypeError(f"{name}() missing argument '{n}'")
                    d = defaults[n]
                    values[n] = d.make() if isinstance(d, _Factory) else d
            for n in names:
                object.__setattr__(self, n, values[n])

        def __repr__(self):
            return f"{name}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"

        def __eq__(self, other):
            if other.__class__ is not self.__class__:
                return NotImplemented
            return all(getattr(self, n) == getattr(other, n) for n in names)

        cls.__init__, cls.__repr__, cls.__eq__ = __init__, __repr__, __eq__
        cls.__record_fields__ = names
        if frozen:
            def __setattr__(self, key, value):
                raise AttributeError(f"cannot assign to field '{key}' of frozen {name}")

            cls.__setattr__ = __setattr__
            cls.__hash__ = lambda self: hash(tuple(getattr(self, n) for n in names))
        else:
            cls.__hash__ = None  # (as a dataclass with eq: mutable records are not hashable)
        return cls

    return wrap if cls is None else wrap(cls)
