"""Property: :func:`construct` (the parser's cheap model constructor) makes the very instance
pydantic's ``model_construct`` makes: the same fields in the same order (the serialiser and
equality read them), the same defaults and the same set of given fields; and what it cannot
build cheaply (a required field missing, a name that is no field) it leaves to
``model_construct``."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from rspush.resourcesync import Entry, Link, Metadata
from rspush.resourcesync.models import construct
from tests.support.strategies import (
    attribute_text,
    extras,
    hash_tuples,
    uris,
    utc_datetimes,
)

_values: dict[str, st.SearchStrategy[Any]] = {
    "capability": attribute_text,
    "at": utc_datetimes,
    "completed": utc_datetimes,
    "from_": utc_datetimes,
    "until": utc_datetimes,
    "change": st.sampled_from(["created", "updated", "deleted"]),
    "datetime": utc_datetimes,
    "hash": hash_tuples,
    "length": st.integers(0, 10**12),
    "path": attribute_text,
    "type": attribute_text,
    "encoding": attribute_text,
    "modified": utc_datetimes,
    "rel": attribute_text,
    "href": uris,
    "pri": st.integers(1, 999_999),
    "profile": uris,
    "extra": extras,
}


@st.composite
def field_values(draw: st.DrawFn, model: type[BaseModel], given: frozenset[str]) -> dict[str, Any]:
    """Values for some of ``model``'s optional fields and all of ``given``, in any order."""
    optional = [n for n in model.model_fields if n not in given and n in _values]
    names = [*given, *draw(st.lists(st.sampled_from(optional), unique=True))] if optional else []
    names = draw(st.permutations(names))
    return {name: draw(_values[name]) for name in names}


def _same(built: BaseModel, expected: BaseModel) -> None:
    assert type(built) is type(expected)
    assert list(built.__dict__.items()) == list(expected.__dict__.items())
    assert built.model_fields_set == expected.model_fields_set
    assert built.__pydantic_extra__ == expected.__pydantic_extra__
    assert built.__pydantic_private__ == expected.__pydantic_private__
    assert built == expected


@settings(max_examples=300, deadline=None)
@given(field_values(Metadata, frozenset({"extra"})))
def test_metadata_is_model_constructs(values: dict[str, Any]) -> None:
    _same(construct(Metadata, dict(values)), Metadata.model_construct(**values))


@settings(max_examples=300, deadline=None)
@given(field_values(Link, frozenset({"rel", "href", "extra"})))
def test_link_is_model_constructs(values: dict[str, Any]) -> None:
    _same(construct(Link, dict(values)), Link.model_construct(**values))


@settings(max_examples=100, deadline=None)
@given(uris, st.none() | utc_datetimes, st.none() | st.just(0.5), st.booleans())
def test_entry_is_model_constructs(loc: str, lastmod: Any, priority: Any, with_md: bool) -> None:
    md = Metadata(change="created") if with_md else None
    values = {"loc": loc, "lastmod": lastmod, "priority": priority, "md": md, "links": ()}
    _same(construct(Entry, dict(values)), Entry.model_construct(**values))


def test_what_it_cannot_build_cheaply_is_model_constructs() -> None:
    # No `extra` (a factory default), no `href` (required), a name that is no field.
    for model, values in [
        (Metadata, {"change": "created"}),
        (Link, {"rel": "alternate", "extra": {}}),
        (Metadata, {"extra": {}, "from": "2026"}),
    ]:
        _same(construct(model, dict(values)), model.model_construct(**values))
