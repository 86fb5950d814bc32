"""hurray.dtype: the C dtype table as Python singletons."""

import copy
import pickle
import re
from pathlib import Path

import pytest

import hurray
from conftest import peer

# The dtype table of the spec (docs/spec/dtypes.md, ADR-003), written out here on purpose: a
# change of the C table that this test does not also see is a format change.
TABLE = {
    # name: (code, tier, kind, bits)
    "bool": (1, 1, "b", 8),
    "int8": (2, 1, "i", 8),
    "int16": (3, 1, "i", 16),
    "int32": (4, 1, "i", 32),
    "int64": (5, 1, "i", 64),
    "uint8": (6, 1, "u", 8),
    "uint16": (7, 1, "u", 16),
    "uint32": (8, 1, "u", 32),
    "uint64": (9, 1, "u", 64),
    "float32": (10, 1, "f", 32),
    "float64": (11, 1, "f", 64),
    "complex64": (12, 1, "c", 64),
    "complex128": (13, 1, "c", 128),
    "float16": (32, 2, "f", 16),
    "bfloat16": (33, 2, "f", 16),
    "float8_e4m3fn": (34, 2, "f", 8),
    "float8_e5m2": (35, 2, "f", 8),
    "float8_e4m3fnuz": (36, 2, "f", 8),
    "float8_e5m2fnuz": (37, 2, "f", 8),
    "float8_e8m0fnu": (38, 2, "f", 8),
    "float8_e3m4": (39, 2, "f", 8),
    "float8_e4m3": (40, 2, "f", 8),
    "float8_e4m3b11fnuz": (41, 2, "f", 8),
    "float6_e2m3fn": (42, 2, "f", 6),
    "float6_e3m2fn": (43, 2, "f", 6),
    "float4_e2m1fn": (44, 2, "f", 4),
    "complex32": (45, 2, "c", 32),
    "int4": (64, 3, "i", 4),
    "uint4": (65, 3, "u", 4),
    "int2": (66, 3, "i", 2),
    "uint2": (67, 3, "u", 2),
    "uint1": (68, 3, "u", 1),
    "q4_0": (69, 3, "q", 8),
    "q4_1": (70, 3, "q", 8),
    "q5_0": (71, 3, "q", 8),
    "q5_1": (72, 3, "q", 8),
    "q8_0": (73, 3, "q", 8),
    "q2_k": (74, 3, "q", 8),
    "q3_k": (75, 3, "q", 8),
    "q4_k": (76, 3, "q", 8),
    "q5_k": (77, 3, "q", 8),
    "q6_k": (78, 3, "q", 8),
    "q8_k": (79, 3, "q", 8),
}


def all_dtypes():
    return [getattr(hurray.dtype, name) for name in TABLE]


def test_every_dtype_of_the_table_is_an_attribute_of_the_type():
    found = {n: v for n, v in vars(hurray.dtype).items() if isinstance(v, hurray.dtype)}
    assert set(found) == set(TABLE)


@pytest.mark.parametrize("name", TABLE)
def test_attributes(name):
    code, tier, kind, bits = TABLE[name]
    d = getattr(hurray.dtype, name)
    assert type(d) is hurray.dtype
    assert (d.name, d.code, d.tier, d.kind, d.bits) == (name, code, tier, kind, bits)
    assert d.itemsize == (bits // 8 if bits % 8 == 0 else None)
    assert str(d) == name


def test_tier1_dtypes_are_module_attributes_and_only_they():
    tier1 = {n for n, (_, tier, _, _) in TABLE.items() if tier == 1}
    module_level = {n for n, v in vars(hurray).items() if isinstance(v, hurray.dtype)}
    assert module_level == tier1
    for name in tier1:
        assert getattr(hurray, name) is getattr(hurray.dtype, name)
        assert (name in hurray.__all__) == (name != "bool")  # bool would shadow the builtin


def test_repr_evaluates_to_the_singleton():
    assert repr(hurray.float32) == "hurray.float32"
    assert repr(hurray.dtype.int4) == "hurray.dtype.int4"
    for d in all_dtypes():
        assert eval(repr(d), {"hurray": hurray}) is d


def test_singletons_hash_and_compare_by_identity_among_themselves():
    assert hurray.dtype("float32") is hurray.float32
    assert hurray.dtype(hurray.dtype.int4) is hurray.dtype.int4
    assert hurray.float32 == hurray.dtype.float32
    assert hurray.float32 != hurray.float64
    assert len({*all_dtypes(), *all_dtypes()}) == len(TABLE)
    assert {hurray.float32: 1}[hurray.dtype("float32")] == 1


def test_pickle_and_copy_return_the_singleton():
    for d in all_dtypes():
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            assert pickle.loads(pickle.dumps(d, protocol)) is d
        assert copy.copy(d) is d
        assert copy.deepcopy(d) is d


def test_unknown_names_and_wrong_types():
    with pytest.raises(hurray.DTypeError, match='no dtype is named "float128"') as info:
        hurray.dtype("float128")
    assert isinstance(info.value, TypeError)
    assert info.value.code == hurray._hurray._status_codes()["HURRAY_EDTYPE"]
    with pytest.raises(TypeError, match="hurray.dtype, a dtype name, a NumPy dtype"):
        hurray.dtype(3)


def test_the_type_is_final_and_immutable():
    with pytest.raises(TypeError):
        class Sub(hurray.dtype):  # noqa: F841
            pass
    with pytest.raises(TypeError):
        hurray.dtype.float32 = None
    with pytest.raises(AttributeError):
        hurray.float32.bits = 16


def test_the_spec_table_matches_the_header():
    """The enum of include/hurray/hurray.h names the same codes."""
    header = Path(__file__).parents[2] / "include" / "hurray" / "hurray.h"
    if not header.exists():
        pytest.skip("the header is not beside the tests (installed package only)")
    enum = dict(re.findall(r"HURRAY_DTYPE_(\w+) = (\d+)", header.read_text()))
    enum.pop("INVALID")
    assert {k.lower(): int(v) for k, v in enum.items()} == {n: c[0] for n, c in TABLE.items()}


def test_other_libraries_dtypes_name_the_same_dtype():
    np = peer("numpy")
    ml_dtypes = peer("ml_dtypes")
    torch = peer("torch")
    for d in all_dtypes():
        assert hurray.dtype(d.name) is d
        if hasattr(ml_dtypes, d.name):
            assert hurray.dtype(getattr(ml_dtypes, d.name)) is d
            assert hurray.dtype(np.dtype(getattr(ml_dtypes, d.name))) is d
        elif d.tier == 1 or d.name == "float16":
            assert hurray.dtype(np.dtype(d.name)) is d
            assert hurray.dtype(np.dtype(d.name).type) is d  # np.float32, np.bool_, ...
        if isinstance(getattr(torch, d.name, None), torch.dtype):
            assert hurray.dtype(getattr(torch, d.name)) is d
    assert hurray.dtype(torch.half) is hurray.dtype.float16
    assert hurray.dtype(float) is hurray.float64 and hurray.dtype(bool) is hurray.bool
    # every dtype argument takes the same forms
    t = hurray.Tensor(bytes(4), torch.bfloat16, [2])
    assert t.dtype is hurray.dtype.bfloat16
    assert hurray.Tensor(bytes(4), np.float32, [1]).dtype is hurray.float32


def test_foreign_dtypes_without_a_hurray_dtype_are_refused():
    np = peer("numpy")
    torch = peer("torch")
    with pytest.raises(hurray.UnsupportedError, match="byte-swapped"):
        hurray.dtype(np.dtype(">f4"))
    for spec in (np.dtype([("a", "f4")]), np.dtype("U3"), object, torch.quint8,
                 torch.float4_e2m1fn_x2):
        with pytest.raises(hurray.DTypeError, match="no dtype is named"):
            hurray.dtype(spec)
    for spec in (None, 3, [1], np.zeros(2)):
        with pytest.raises(TypeError, match="NumPy dtype or scalar type .* or a PyTorch dtype"):
            hurray.dtype(spec)
