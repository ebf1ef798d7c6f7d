"""An admission policy evaluated as the apiserver would, without one: cel-python (RE2,
as cel-go) with shims for the Kubernetes CEL libraries the policy uses (strings'
`join`, `substring`, `replace` and `trim`, lists' `indexOf`, regex's `find` and
`findAll`), and
JSON Patch applied by RFC 6902 (jsonpatch). What this cannot prove: cel-python is
not cel-go (its type checker, its cost estimates and limits), and the apiserver
applies patches with its own library (docs/inject.md, "What the tests prove")."""

from __future__ import annotations

import copy
import functools
import re
import typing

import celpy
import jsonpatch
import re2
from celpy import celtypes

# The apiserver compiles mutations with JSONPatch{} and Object{} declared; its
# variables and match conditions without them (a constructor there is refused).
_PATCH = re.compile(r"JSONPatch\{op: ")


class Refused(Exception):
    """What the apiserver would refuse to compile."""


def _join(items: celtypes.ListType, sep: celtypes.StringType) -> celtypes.StringType:
    return celtypes.StringType(str(sep).join(str(i) for i in items))


def _index_of(items: celtypes.ListType, value: typing.Any) -> celtypes.IntType:
    return celtypes.IntType(next((i for i, v in enumerate(items) if v == value), -1))


def _find(text: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.StringType:
    m = re2.search(str(pattern), str(text))
    return celtypes.StringType(m.group(0) if m else "")


def _find_all(text: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.ListType:
    found = [m.group(0) for m in re2.finditer(str(pattern), str(text))]
    return celtypes.ListType([celtypes.StringType(f) for f in found])


def _substring(text: celtypes.StringType, start: celtypes.IntType) -> celtypes.StringType:
    return celtypes.StringType(str(text)[int(start) :])


def _text(test: typing.Callable[[str, str], bool]) -> typing.Callable[..., celtypes.BoolType]:
    """A string test over a text cel-python 0.5 may hand in as a bare str (what its
    `+` of two strings returns)."""
    return lambda text, arg: celtypes.BoolType(test(str(text), str(arg)))


def _replace(text: typing.Any, old: typing.Any, new: typing.Any) -> celtypes.StringType:
    return celtypes.StringType(str(text).replace(str(old), str(new)))


FUNCTIONS = {
    "replace": _replace,
    "trim": lambda text: celtypes.StringType(str(text).strip()),
    "contains": _text(lambda t, a: a in t),
    "startsWith": _text(str.startswith),
    "endsWith": _text(str.endswith),
    "matches": _text(lambda t, a: re2.search(a, t) is not None),
    "join": _join,
    "indexOf": _index_of,
    "find": _find,
    "findAll": _find_all,
    "substring": _substring,
}


@functools.lru_cache(maxsize=256)
def _program(expression: str, mutation: bool) -> celpy.Runner:
    if not mutation and ("JSONPatch{" in expression or "Object{" in expression):
        raise Refused("a constructor outside mutations: the apiserver compiles this without it")
    if mutation:  # JSONPatch{op: O, path: P, value: V} as the map it builds
        expression = _PATCH.sub('{"op": ', expression)
        expression = expression.replace(", path: ", ', "path": ').replace(
            ", value: ", ', "value": '
        )
    env = celpy.Environment()
    try:
        return env.program(env.compile(expression), functions=FUNCTIONS)
    except celpy.CELParseError as exc:
        raise Refused(str(exc)) from None


def _plain(value: typing.Any) -> typing.Any:
    """A CEL value as JSON's (cel-python's `+` of two lists gives a bare list)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, celtypes.BoolType)):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    return str(value) if isinstance(value, str) else value


def _variables(spec: dict[str, typing.Any], pod: dict[str, typing.Any]) -> typing.Any:
    """The activation an admission policy's expressions see: the Pod and its
    variables (in order); None where a match condition leaves the Pod out."""
    activation: dict[str, typing.Any] = {"object": celpy.json_to_cel(pod)}
    for condition in spec.get("matchConditions", []):
        if not _program(condition["expression"], False).evaluate(activation):
            return None
    found = celtypes.MapType({})
    activation["variables"] = found
    for variable in spec.get("variables", []):
        value = _program(variable["expression"], False).evaluate(activation)
        if isinstance(value, celpy.CELEvalError):
            raise AssertionError(f"variables.{variable['name']}: {value}")
        found[celtypes.StringType(variable["name"])] = value
    return activation


def evaluate(spec: dict[str, typing.Any], pod: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """An admission policy's variables as JSON values; {} where it leaves the Pod out."""
    activation = _variables(spec, pod)
    return {} if activation is None else _plain(activation["variables"])


def admit(policy: dict[str, typing.Any], pod: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """The Pod as a MutatingAdmissionPolicy leaves it: each mutation's JSON Patch
    applied, and applied again while one changes it (reinvocation `IfNeeded`)."""
    spec = policy["spec"]
    for _ in range(3):
        activation = _variables(spec, pod)
        if activation is None:
            return pod
        patched = pod
        for mutation in spec["mutations"]:
            runner = _program(mutation["jsonPatch"]["expression"], True)
            patch = _plain(runner.evaluate(activation))
            patched = jsonpatch.apply_patch(patched, patch)
        if patched == pod:
            return pod
        pod = copy.deepcopy(patched)
    raise AssertionError("the policy keeps changing the Pod")


def validate(policy: dict[str, typing.Any], pod: dict[str, typing.Any]) -> list[str]:
    """The messages a ValidatingAdmissionPolicy's failed validations give the Pod."""
    activation = _variables(policy["spec"], pod)
    if activation is None:
        return []
    out = []
    for check in policy["spec"]["validations"]:
        if not _program(check["expression"], False).evaluate(activation):
            out.append(str(_program(check["messageExpression"], False).evaluate(activation)))
    return out
