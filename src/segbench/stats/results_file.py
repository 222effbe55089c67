"""Reading a results file: checked against the layout of ``results.ResultsDocument`` at the boundary (``read_results``).

``type_problems`` walks parsed JSON against any type of ``results`` (missing keys, wrong leaf types, undeclared keys),
so a file that is not a results document fails naming the first place it departs, not with a KeyError inside a page;
``verify_recorded`` refuses a file that is not the bytes its stage wrote.
"""

import functools
import types
import typing
from pathlib import Path
from typing import Any, cast

from segbench.base.io import changed_since_recorded, file_digest, read_json

from .results import ResultsDocument


def read_results(path: Path | str, verify: bool = True) -> ResultsDocument:
    """A results file (``results/<name>.json``, or one ``segbench evaluate`` wrote, perhaps on another machine) read and
    checked against :class:`ResultsDocument` at the boundary: a file that is not one (another JSON, a truncated copy,
    one from a segbench whose keys differ) is an error naming the file and the first place it departs, not a KeyError
    inside a page. Keys the types do not declare are ignored: a reader needs only those it reads.

    ``verify``: a file some ``dvc.lock`` records must be the bytes its stage wrote (its md5 there), so a changed copy
    (a damaged DVC cache object checked out, an edit) is refused before a number of it is shown; ``segbench reanalyze``
    reads without it, to say what such a file still holds."""
    if verify:
        verify_recorded(Path(path))
    document = read_json(path, "results JSON")
    problems = type_problems(document, ResultsDocument, undeclared=False)
    if problems:
        raise ValueError(f"{path}: not a segbench results document: {problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}")
    return cast(ResultsDocument, document)


@functools.cache
def _hints(td: type) -> dict[str, object]:
    return typing.get_type_hints(td)


def type_problems(value: object, tp: Any, path: str = "", undeclared: bool = True) -> list[str]:
    """Where ``value`` (parsed JSON) departs from the type ``tp`` of this module: missing keys, wrong leaf types and,
    with ``undeclared``, keys the type does not declare (tests hold every results file to that)."""
    if tp is Any:
        return []
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path or '/'}: {tp.__name__} expected, got {type(value).__name__}"]
        hints = _hints(tp)
        out = [f"{path}/{k}: key not declared in {tp.__name__}" for k in sorted(set(value) - set(hints))] if undeclared else []
        out += [f"{path}/{k}: required key of {tp.__name__} missing" for k in sorted(tp.__required_keys__ - set(value))]
        for key in sorted(set(value) & set(hints)):
            out += type_problems(value[key], hints[key], f"{path}/{key}", undeclared)
        return out
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        tried = [type_problems(value, arm, path, undeclared) for arm in args if arm is not type(None)]
        return [] if any(not t for t in tried) else min(tried, key=len)
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path or '/'}: dict expected, got {type(value).__name__}"]
        if _all_leaves(value.values(), args[1]):
            return []
        return [m for k, v in value.items() for m in type_problems(v, args[1], f"{path}/{k}", undeclared)]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path or '/'}: list expected, got {type(value).__name__}"]
        if _all_leaves(value, args[0]):
            return []
        return [m for i, v in enumerate(value) for m in type_problems(v, args[0], f"{path}[{i}]", undeclared)]
    check = _LEAVES.get(tp)
    ok = check(value) if check else isinstance(value, cast(type, tp))
    return [] if ok else [f"{path or '/'}: {getattr(tp, '__name__', tp)} expected, got {value!r}"]


#: leaf types -> their check (a float may be written as a whole number; a bool is no number), used value by value and,
#: for the levels that hold many (per-case values, p-value matrices), in one pass with the detailed walk only when one fails
_LEAVES = {
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
}


def _all_leaves(values: typing.Iterable[object], tp: object) -> bool:
    """Whether every value is of the leaf type ``tp`` (float, int, str, bool, or one of them or None); False for any
    other type (then the caller walks the values)."""
    arms = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    optional = type(None) in arms
    arms = tuple(a for a in arms if a is not type(None))
    if len(arms) != 1 or arms[0] not in _LEAVES:
        return False
    check = _LEAVES[arms[0]]
    return all(check(v) or (optional and v is None) for v in values)


def verify_recorded(path: Path) -> None:
    """A ValueError when ``path`` is not the file its producing stage wrote (the md5 its ``dvc.lock`` records), naming
    the file, both digests and how to get the producer's bytes back; nothing for a file no lock records."""
    record = changed_since_recorded(path)
    if record is not None:
        raise ValueError(
            f"{path}: not the file stage {record.stage} wrote (md5 {file_digest(path, 'md5')}, {record.lock} records "
            f"{record.md5}); refused, no number of it is shown: `dvc repro -f -s {record.stage}` writes it again "
            f"(`dvc checkout {path}` restores DVC's copy unless that copy is the damaged one); "
            f"`segbench reanalyze {path}` says whether its statistics still follow from its rows"
        )
