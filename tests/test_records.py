"""enzcc.records: the record classes of the modules every enzcc run imports behave as the dataclasses they
replace."""

import pytest

from enzcc.records import factory, record


@record
class Point:
    x: int
    """first"""
    y: int = 2
    tags: list = factory(list)


@record(frozen=True)
class Key:
    name: str
    arity: int = 0


def test_constructor_defaults_and_factories():
    p = Point(1)
    assert (p.x, p.y, p.tags) == (1, 2, [])
    q = Point(1, y=3, tags=["a"])
    assert (q.x, q.y, q.tags) == (1, 3, ["a"])
    p.tags.append("z")
    assert Point(5).tags == []  # (each record its own list)
    assert "tags" not in Point.__dict__ and Point.y == 2
    with pytest.raises(TypeError, match="missing argument 'x'"):
        Point()
    with pytest.raises(TypeError, match="unexpected or repeated argument 'z'"):
        Point(1, z=2)
    with pytest.raises(TypeError, match="unexpected or repeated argument 'x'"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        Point(1, 2, [], 4)


def test_repr_equality_and_hashing():
    assert repr(Point(1)) == "Point(x=1, y=2, tags=[])"
    assert Point(1) == Point(1, 2, []) and Point(1) != Point(2) and Point(1) != Key("a")
    with pytest.raises(TypeError):
        hash(Point(1))
    assert Key("a") == Key("a", 0) and hash(Key("a")) == hash(Key("a", 0)) and len({Key("a"), Key("a")}) == 1
    k = Key("a")
    with pytest.raises(AttributeError, match="frozen Key"):
        k.arity = 3
    p = Point(1)
    p.y = 7
    assert p.y == 7
