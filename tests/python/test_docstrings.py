"""The public API's docstrings: the NumPy docstring standard, and their Examples run.

Every public function, class, method and property of `hurray` has a docstring whose sections
are the standard's, in its order, each underlined; a callable's Parameters section names
exactly the parameters of its signature, in order; functions, classes and methods have
Examples, and every example runs here as a doctest (with `hurray` imported, in a temporary
directory), so `help(hurray.X)` never shows an example that does not work.
"""

import doctest
import inspect
import re

import pytest

import hurray

# numpydoc's order of sections (https://numpydoc.readthedocs.io/en/latest/format.html).
SECTIONS = ["Parameters", "Returns", "Yields", "Receives", "Other Parameters", "Raises",
            "Warns", "Warnings", "See Also", "Notes", "References", "Examples"]
# Dunders that are part of the public surface (protocols users call or implement).
PUBLIC_DUNDERS = {"__hurray__", "__dlpack__", "__dlpack_device__", "__jax_array__",
                  "__array__", "__array_namespace__"}
CLASSES = [hurray.Tensor, hurray.File, hurray.Device, hurray.dtype, hurray.mode, hurray.Client,
           hurray.Server]


def public_objects():
    """(qualified name, object, kind) of every documented public object."""
    found = [("hurray", hurray, "module")]
    for name, value in sorted(vars(hurray).items()):
        if name.startswith("_") or isinstance(value, hurray.dtype) or not callable(value):
            continue
        if isinstance(value, type) and issubclass(value, BaseException):
            found.append((f"hurray.{name}", value, "exception"))
        elif isinstance(value, type):
            continue  # the classes below, with their members
        else:
            found.append((f"hurray.{name}", value, "function"))
    for cls in CLASSES:
        found.append((f"hurray.{cls.__name__}", cls, "class"))
        for name, member in vars(cls).items():
            if (name.startswith("_") and name not in PUBLIC_DUNDERS) or \
                    isinstance(member, hurray.dtype):
                continue
            kind = "method" if callable(member) else "property"
            found.append((f"hurray.{cls.__name__}.{name}", member, kind))
    return found


OBJECTS = public_objects()
IDS = [name for name, _, _ in OBJECTS]


def body(doc):
    """The docstring without the `name(...)\\n--\\n\\n` signature block CPython strips."""
    return inspect.cleandoc(doc or "")


def sections(text):
    """{section title: its lines} of a NumPy-style docstring, and the titles in order."""
    lines = text.splitlines()
    found, order, current = {}, [], None
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1]) and line.strip():
            current = line.strip()
            order.append(current)
            found[current] = []
        elif current is not None and not re.fullmatch(r"-{3,}", line):
            found[current].append(line)
    return found, order


def signature_parameters(obj, kind):
    """The parameters a caller passes: without a method's `self` or a classmethod's `type`."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    names = [p.name for p in signature.parameters.values()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return names[1:] if kind == "method" else names


def test_every_public_name_is_checked():
    names = set(IDS)
    assert {f"hurray.{name}" for name in hurray.__all__
            if callable(getattr(hurray, name)) and
            not isinstance(getattr(hurray, name), hurray.dtype)} <= names
    for expected in ("hurray.save", "hurray.open", "hurray.Tensor.tolist", "hurray.Tensor.shape",
                     "hurray.File.slice", "hurray.Device.name", "hurray.dtype.bits",
                     "hurray.Tensor.__dlpack__", "hurray.LayoutError"):
        assert expected in names


@pytest.mark.parametrize("name, obj, kind", OBJECTS, ids=IDS)
def test_docstring_follows_the_numpy_standard(name, obj, kind):
    text = body(obj.__doc__)
    assert text, f"{name} has no docstring"
    summary = text.split("\n\n")[0]
    assert "\n" not in summary and summary.endswith("."), \
        f"{name}: the summary is one line ending with a period, not {summary!r}"
    prose = text.split("\nExamples\n--------\n")[0]  # doctest output is as wide as it is
    long = [line for line in prose.splitlines() if len(line) > 79]
    assert not long, f"{name}: lines help() would show wider than 79 columns: {long}"
    found, order = sections(text)
    unknown = [title for title in order if title not in SECTIONS]
    assert not unknown, f"{name}: sections the standard does not have: {unknown}"
    assert order == sorted(order, key=SECTIONS.index), f"{name}: sections out of order {order}"
    for title in order:
        underline = text.splitlines()[text.splitlines().index(title) + 1]
        assert underline == "-" * len(title), f"{name}: {title!r} underlined {underline!r}"
    if kind in ("module", "function", "method", "class"):
        assert "Examples" in found, f"{name} has no Examples section"
        parameters = signature_parameters(obj, kind)
        if parameters:
            assert "Parameters" in found, f"{name} takes {parameters} but documents none"
        if "Parameters" in found:
            # "name : type" or "start, stop : int" at the left margin; descriptions indented
            documented = [name.strip() for line in found["Parameters"]
                          if line and not line.startswith(" ")
                          for name in re.split(r"\s*:", line)[0].split(",")]
            assert documented == parameters, \
                f"{name}: documents {documented}, its signature has {parameters}"


@pytest.mark.parametrize("name, obj, kind", OBJECTS, ids=IDS)
def test_docstring_examples_run(name, obj, kind, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    test = doctest.DocTestParser().get_doctest(obj.__doc__ or "", {"hurray": hurray}, name,
                                               None, 0)
    if not test.examples:
        assert kind in ("property", "exception"), f"{name} has no examples"
        return
    report = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=report.append)
    assert result.failed == 0, "".join(report)
