# SPDX-License-Identifier: Apache-2.0
"""ropegen's C ABI (runtime/include/ropegen/rope.h) for Python, through ctypes over libropegen.so.

Arrays are passed to the library as they are, never copied: numpy arrays (through the array
interface; bfloat16 through ml_dtypes' dtype when installed) and torch CPU tensors (torch 2.1 or
newer; through data_ptr and stride). Tensors are [batch, seq, heads, head_dim] views of non-negative strides (the
head_dim stride 1), or [seq, heads, head_dim] for one sequence; cos/sin tables have rules of their
own (build_cos_sin_cache). A call the library refuses raises RopeError with the library's status
and message, and leaves every array untouched; so do the binding's own refusals: RopeError for
what breaks the ABI's rules, TypeError for an argument of the wrong type (a list for an array),
ValueError for a read-only output, RuntimeError for a torch output that requires grad.
A call bumps the version counter of each torch tensor it writes, as torch's own in-place
operations do, so autograd refuses a backward pass that would read one saved before the write.

    import ropegen
    ropegen.rope(q, k, positions=pos, scaling={"rope_type": "llama3", "factor": 8.0, ...})

For a call repeated on the same arrays (a decode step), ropegen.prepare() converts the arguments
once and returns an object whose call only runs rope_dispatch.
"""
import ctypes
import operator
import os
import sys
from pathlib import Path

__all__ = ["PreparedRope", "RopeError", "rope", "prepare", "build_cos_sin_cache", "library_version", "query"]

# --- the ABI's types, field for field as rope.h declares them -----------------------------------
F32, F16, BF16 = 0, 1, 2
_STYLES = {"half": 0, "interleaved": 1}
_SOURCES = {"cache": 0, "compat": 1, "precise": 2}
_SCALINGS = {"default": 0, "linear": 1, "dynamic": 2, "yarn": 3, "longrope": 4, "llama3": 5, "inv_freq": 6}
_ABI_VERSION = 1


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("sizes", ctypes.c_int64 * 4),
                ("strides", ctypes.c_int64 * 4)]


class _Positions(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("index_type", ctypes.c_int), ("data", ctypes.c_void_p),
                ("strides", ctypes.c_int64 * 2), ("offset", ctypes.c_int64)]


class _Angles(ctypes.Structure):
    _fields_ = [("source", ctypes.c_int), ("cos_cache", ctypes.c_void_p), ("sin_cache", ctypes.c_void_p),
                ("cache_len", ctypes.c_int64), ("cache_row_stride", ctypes.c_int64), ("cache_dtype", ctypes.c_int),
                ("base", ctypes.c_double), ("attn_factor", ctypes.c_float)]


class _Scaling(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("factor", ctypes.c_float), ("original_max_positions", ctypes.c_int64),
                ("max_positions", ctypes.c_int64), ("low_freq_factor", ctypes.c_float),
                ("high_freq_factor", ctypes.c_float), ("beta_fast", ctypes.c_float), ("beta_slow", ctypes.c_float),
                ("mscale", ctypes.c_float), ("mscale_all_dim", ctypes.c_float), ("yarn_no_truncate", ctypes.c_int32),
                ("short_factor", ctypes.c_void_p), ("long_factor", ctypes.c_void_p), ("inv_freq", ctypes.c_void_p)]


class _Mrope(ctypes.Structure):
    _fields_ = [("sections", ctypes.c_int32 * 3), ("stream_stride", ctypes.c_int64)]


class _Varlen(ctypes.Structure):
    _fields_ = [("cu_seqlens", ctypes.c_void_p), ("index_type", ctypes.c_int), ("num_seqs", ctypes.c_int64)]


class _Params(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("abi_version", ctypes.c_uint32), ("style", ctypes.c_int),
                ("direction", ctypes.c_int), ("rotary_dim", ctypes.c_int32), ("rotary_offset", ctypes.c_int32),
                ("q", _Tensor), ("k", _Tensor), ("q_out", _Tensor), ("k_out", _Tensor), ("positions", _Positions),
                ("angles", _Angles), ("num_threads", ctypes.c_int32), ("device", ctypes.c_int),
                ("stream", ctypes.c_void_p), ("scaling", _Scaling), ("round_cos_sin", ctypes.c_int32),
                ("mrope", _Mrope), ("varlen", _Varlen)]


class _Report(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("status", ctypes.c_int), ("message", ctypes.c_char * 256),
                ("kernel", ctypes.c_char * 96)]


class _CacheSpec(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("source", ctypes.c_int), ("rotary_dim", ctypes.c_int32),
                ("base", ctypes.c_double), ("attn_factor", ctypes.c_float), ("scaling", _Scaling),
                ("cos_cache", ctypes.c_void_p), ("sin_cache", ctypes.c_void_p), ("cache_len", ctypes.c_int64),
                ("cache_row_stride", ctypes.c_int64), ("cache_dtype", ctypes.c_int)]


def _load_library():
    """ROPEGEN_LIBRARY when set (and only it: a library asked for is never silently replaced), else the
    libropegen.so beside this package (the build's staging), else the system's."""
    chosen = os.environ.get("ROPEGEN_LIBRARY")
    if chosen:
        try:
            return ctypes.CDLL(chosen)
        except OSError as error:
            raise ImportError(f"ropegen: ROPEGEN_LIBRARY={chosen} cannot be loaded: {error}") from None
    staged = Path(__file__).resolve().parent / "libropegen.so"
    try:
        return ctypes.CDLL(str(staged) if staged.exists() else "libropegen.so.1")
    except OSError as error:
        raise ImportError(f"ropegen: libropegen.so not found beside the package nor on the loader's path "
                          f"(set ROPEGEN_LIBRARY to its path): {error}") from None


_lib = _load_library()
for _name, _args in {"rope_dispatch": [ctypes.POINTER(_Params), ctypes.POINTER(_Report)],
                     "rope_query": [ctypes.POINTER(_Params), ctypes.POINTER(_Report)],
                     "rope_build_cos_sin_cache": [ctypes.POINTER(_CacheSpec), ctypes.POINTER(_Report)],
                     "rope_plan_create": [ctypes.POINTER(_Params), ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_Report)],
                     "rope_plan_run": [ctypes.c_void_p, ctypes.POINTER(_Report)], "rope_plan_destroy": [ctypes.c_void_p],
                     "rope_status_string": [ctypes.c_int], "rope_version_string": [],
                     "rope_abi_version": []}.items():
    getattr(_lib, _name).argtypes = _args
_lib.rope_dispatch.restype = _lib.rope_query.restype = _lib.rope_build_cos_sin_cache.restype = ctypes.c_int
_lib.rope_plan_create.restype = _lib.rope_plan_run.restype = ctypes.c_int
_lib.rope_plan_destroy.restype = None
_lib.rope_status_string.restype = _lib.rope_version_string.restype = ctypes.c_char_p
_lib.rope_abi_version.restype = ctypes.c_uint32
if _lib.rope_abi_version() != _ABI_VERSION:
    raise ImportError(f"ropegen: libropegen.so has ABI version {_lib.rope_abi_version()}, this binding {_ABI_VERSION}")


class RopeError(ValueError):
    """A call the library refused: `status` is the rope_status name, the message the library's."""

    def __init__(self, status, message):
        self.status_code = status
        self.status = _lib.rope_status_string(status).decode().split(":")[0]
        super().__init__(f"{self.status}: {message}")


def library_version():
    return _lib.rope_version_string().decode()


# --- arrays as rope_tensor views -----------------------------------------------------------------
def _element_strides(interface, itemsize, name):
    """The array interface's strides in elements (C-contiguous when it gives none)."""
    shape, strides = list(interface["shape"]), interface.get("strides")
    if strides is None:
        strides, step = [], 1
        for size in reversed(shape):
            strides.insert(0, step)
            step *= size
        return strides
    if any(s % itemsize for s in strides):
        raise RopeError(8, f"{name}.strides={strides} bytes: not whole elements")
    return [s // itemsize for s in strides]


def _little_endian(interface, name):
    """Refuses a byte-swapped array: numpy names its dtype like the native one, and the library would
    read its bytes as little-endian."""
    if interface["typestr"][0] == ">":
        raise RopeError(3, f"{name}.dtype={interface['typestr']} is big-endian; the library reads little-endian "
                           "values (x.astype(x.dtype.newbyteorder('<')) converts it)")


# torch gives an empty tensor no memory (data_ptr 0), which the library would refuse as NULL; it reads
# nothing of an empty array, so any valid address serves.
_EMPTY = ctypes.c_int64()


def _is_torch(x):
    return hasattr(x, "data_ptr") and hasattr(x, "stride")


def _written_torch_tensors(*arrays):
    """The torch tensors among the arrays a call writes (None: no array), less inference tensors,
    which have no version counter and which autograd never saves."""
    return [x for x in arrays if x is not None and _is_torch(x) and not x.is_inference()]


def _written_by_rope(q, k, q_out, k_out):
    """The torch tensors a rope() call writes: q_out and k_out, or q and k in place."""
    return _written_torch_tensors(q if q_out is None else q_out, k if k_out is None else k_out)


def _mark_written(tensors):
    # Under no_grad too: a tensor saved for backward before the write must fail the backward
    # pass ("modified by an inplace operation"), not feed it the rotated values.
    # One tensor a call: torch before 2.5 takes no list.
    for tensor in tensors:
        sys.modules["torch"].autograd.graph.increment_version(tensor)


def _torch_data(x):
    return x.data_ptr() or (ctypes.addressof(_EMPTY) if x.numel() == 0 else 0)


def _interface(x, name, kinds):
    """The array interface of x, or a TypeError naming the argument (a list, say)."""
    interface = getattr(x, "__array_interface__", None)
    if interface is None:
        raise TypeError(f"{name}: a torch tensor or a numpy array of {kinds}, not {type(x).__name__}")
    return interface


def _array_view(x, name, writable=False):
    """(data pointer, dtype code, sizes, element strides) of a torch tensor or a numpy array, no copy."""
    if _is_torch(x):
        if x.device.type != "cpu":
            raise RopeError(13, f"{name} is on {x.device}; the binding passes CPU tensors only")
        dtype = {"torch.float32": F32, "torch.float16": F16, "torch.bfloat16": BF16}.get(str(x.dtype))
        if dtype is None:
            raise RopeError(3, f"{name}.dtype={x.dtype}: not float32, float16 or bfloat16")
        # The library writes memory behind autograd's back: the gradients would be silently wrong.
        if writable and x.requires_grad and sys.modules["torch"].is_grad_enabled():
            raise RuntimeError(f"{name} requires grad and grad mode is on: ropegen's write bypasses autograd; "
                               "write under torch.no_grad() or into a tensor that does not require grad")
        return _torch_data(x), dtype, list(x.shape), list(x.stride())
    interface = _interface(x, name, "float32, float16 or bfloat16")
    if writable and interface["data"][1]:
        raise ValueError(f"{name} is read-only; the library writes it")
    _little_endian(interface, name)
    dtype = {"float32": F32, "float16": F16, "bfloat16": BF16}.get(getattr(getattr(x, "dtype", None), "name", ""))
    if dtype is None:
        raise RopeError(3, f"{name}.dtype={getattr(x, 'dtype', interface['typestr'])}: not float32, float16 or bfloat16")
    strides = _element_strides(interface, 4 if dtype == F32 else 2, name)
    return interface["data"][0], dtype, list(interface["shape"]), strides


def _tensor(x, name, writable=False):
    if x is None:
        return _Tensor()
    data, dtype, sizes, strides = _array_view(x, name, writable)
    if len(sizes) == 3:  # one sequence: [seq, heads, head_dim]
        sizes, strides = [1] + sizes, [0] + strides
    if len(sizes) != 4:
        raise RopeError(6, f"{name} has {len(sizes)} dimensions; [batch, seq, heads, head_dim] or [seq, heads, head_dim]")
    return _Tensor(data, dtype, (ctypes.c_int64 * 4)(*sizes), (ctypes.c_int64 * 4)(*strides))


def _index_view(x, name):
    """An integer array (int32 or int64, numpy or torch) as (pointer, index type, shape, element strides)."""
    if _is_torch(x):
        kinds = {"torch.int32": 0, "torch.int64": 1}
        if str(x.dtype) not in kinds or x.device.type != "cpu":
            raise RopeError(2, f"{name}: a CPU int32 or int64 tensor, not {x.dtype} on {x.device}")
        return _torch_data(x), kinds[str(x.dtype)], list(x.shape), list(x.stride())
    interface = _interface(x, name, "int32 or int64")
    _little_endian(interface, name)
    kind = {"<i4": 0, "<i8": 1}.get(interface["typestr"])
    if kind is None:
        raise RopeError(2, f"{name}.dtype={interface['typestr']}: positions are int32 or int64")
    strides = _element_strides(interface, 4 if kind == 0 else 8, name)
    return interface["data"][0], kind, list(interface["shape"]), strides


def _float_table(values, count, name):
    """A float32 table of `count` values (kept alive by the returned ctypes array)."""
    values = [float(v) for v in values]
    if len(values) != count:
        raise RopeError(11, f"scaling.{name} has {len(values)} values; rotary_dim/2={count} are read")
    return (ctypes.c_float * count)(*values)


# transformers' rope_parameters keys this binding reads; any other key is refused rather than ignored.
_SCALING_KEYS = {"rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings",
                 "max_position_embeddings", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale",
                 "mscale_all_dim", "truncate", "attention_factor", "short_factor", "long_factor", "inv_freq"}


def _given_once(argument, value, key, scaling):
    """An argument that transformers' rope_parameters may also carry (value None or 0: not given)."""
    carried = scaling.get(key)
    if value and carried is not None and float(carried) != float(value):
        raise RopeError(11, f"{argument}={value} and scaling[{key!r}]={carried} differ; give one, or both equal")
    return float(value or carried or 0.0)


def _scaling(scaling, pairs, keep_alive, base, attn_factor):
    """transformers' rope_parameters (rope_type, rope_theta, factor, original_max_position_embeddings, ...)
    as rope_scaling. Returns (rope_scaling, base, attn_factor); 0 takes the library's default."""
    out = _Scaling()
    scaling = scaling or {}
    unknown = sorted(set(scaling) - _SCALING_KEYS)
    if unknown:
        raise RopeError(2, f"scaling has keys {unknown} this binding does not read (rotary_dim= and mrope_section= "
                           f"are arguments of their own); it reads {', '.join(sorted(_SCALING_KEYS))}")
    base, attn_factor = _given_once("base", base, "rope_theta", scaling), _given_once("attn_factor", attn_factor,
                                                                                      "attention_factor", scaling)
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in _SCALINGS:
        raise RopeError(2, f"scaling rope_type={rope_type!r}: one of {', '.join(_SCALINGS)}")
    out.type = _SCALINGS[rope_type]
    factor = scaling.get("factor")
    original = scaling.get("original_max_position_embeddings")
    if rope_type == "dynamic" and original is None:  # transformers' dynamic NTK grows from max_position_embeddings
        original = scaling.get("max_position_embeddings")
    if rope_type == "yarn" and factor is None and original and scaling.get("max_position_embeddings"):
        factor = scaling["max_position_embeddings"] / original  # transformers' YaRN without a factor (DeepSeek-V3)
    out.factor = float(factor or 0.0)
    out.original_max_positions = _int(original or 0, "scaling['original_max_position_embeddings']", 64)
    out.max_positions = _int(scaling.get("max_position_embeddings") or 0, "scaling['max_position_embeddings']", 64)
    out.low_freq_factor = float(scaling.get("low_freq_factor") or 0.0)
    out.high_freq_factor = float(scaling.get("high_freq_factor") or 0.0)
    out.beta_fast = float(scaling.get("beta_fast") or 0.0)
    out.beta_slow = float(scaling.get("beta_slow") or 0.0)
    out.mscale = float(scaling.get("mscale") or 0.0)
    out.mscale_all_dim = float(scaling.get("mscale_all_dim") or 0.0)
    out.yarn_no_truncate = 0 if scaling.get("truncate", True) else 1
    for field in ("short_factor", "long_factor", "inv_freq"):
        if scaling.get(field) is not None:
            table = _float_table(scaling[field], pairs, field)
            keep_alive.append(table)
            setattr(out, field, ctypes.cast(table, ctypes.c_void_p))
    return out, base, attn_factor


def _int(value, name, bits):
    """value for a C integer field of `bits` bits: refused where ctypes would wrap it silently."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}={value!r}: an integer, not {type(value).__name__}") from None
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise RopeError(11, f"{name}={value} is outside the int{bits} range [-2^{bits - 1}, 2^{bits - 1})")
    return value


def _index_values(data, index_type, count):
    """The first `count` values of a contiguous int32 or int64 array at address `data`."""
    return list(((ctypes.c_int32 if index_type == 0 else ctypes.c_int64) * count).from_address(data))


def _positions(p, positions, offset, positions_kind, mrope_section, prepared):
    """Fills p.positions (and p.mrope's stream stride) after checking positions' shape against q's:
    the library reads positions through the strides it is given, so a smaller array would be read past."""
    if positions_kind not in (None, "table", "offsets"):
        raise RopeError(2, f"positions_kind={positions_kind!r}: None (inferred), 'table' or 'offsets'")
    if positions is None:
        if positions_kind is not None:
            raise RopeError(11, f"positions_kind={positions_kind!r} without positions: it says how to read a positions "
                                "array; with none, every sequence starts at `offset`")
        p.positions.kind, p.positions.offset = 0, _int(offset, "offset", 64)
        return
    if offset != 0:
        raise RopeError(11, f"offset={offset} with positions: the array gives every position (or each sequence's "
                            "offset); add the offset to it, or pass offset alone")
    data, index_type, shape, strides = _index_view(positions, "positions")
    p.positions.data, p.positions.index_type, shape = data, index_type, tuple(shape)
    batch, seq = p.q.sizes[0], p.q.sizes[1]
    streams = () if mrope_section is None else (3,)
    # A row per sequence; one row for every sequence (transformers' default position_ids, [1, seq]);
    # one sequence's, or THD's tokens, as a 1-D table.
    tables = [streams + (batch, seq)] + [streams + (1, seq) if batch > 1 else streams + (seq,)]
    thd = bool(p.varlen.cu_seqlens)
    offsets = [] if streams else [(p.varlen.num_seqs,) if thd else (batch,)]  # mrope takes tables only
    is_table, is_offsets = shape in tables, shape in offsets
    if positions_kind is None and is_table and is_offsets:
        # Both readings give the same positions when every sequence has one token. Without THD that is
        # q's one token; with THD it depends on cu_seqlens, whose contents a prepared call may change.
        count = shape[0] + 1
        one_token_each = not thd or (not prepared and _index_values(p.varlen.cu_seqlens, p.varlen.index_type, count)
                                     == list(range(count)))
        if not one_token_each:
            raise RopeError(6, f"positions.shape={shape} is both one position per token and one offset per "
                               "sequence (num_seqs == total_tokens): say which with positions_kind='table' or 'offsets'")
    kind = positions_kind or ("table" if is_table else "offsets")
    if not (is_table if kind == "table" else is_offsets):
        expected = [f"{s} (table)" for s in tables if positions_kind != "offsets"]
        expected += [f"{s} (offsets)" for s in offsets if positions_kind != "table"]
        raise RopeError(6, f"positions.shape={shape} does not fit q's [batch, seq]=[{batch}, {seq}]"
                           + (f" and num_seqs={p.varlen.num_seqs}" if thd else "") + ": expected "
                           + (" or ".join(expected) or f"a table for mrope, not offsets"))
    if kind == "table":
        p.positions.kind = 1
        p.positions.strides[0] = strides[-2] if len(shape) - len(streams) == 2 and shape[-2] == batch else 0
        p.positions.strides[1] = strides[-1]
        if streams:
            p.mrope.stream_stride = strides[0]
    else:
        p.positions.strides[0] = strides[0]


def _tables(cos, sin, names, pairs, writable=False):
    """(cos pointer, sin pointer, dtype, rows, row stride) of a pair of cos/sin tables, checked so that the
    library, which takes `pairs` values from each row and one row stride for both, stays inside them."""
    views = []
    for name, table in zip(names, (cos, sin)):
        if table is None:
            raise RopeError(1, f"{name} is None; cos and sin tables go together")
        views.append(_array_view(table, name, writable))
    (cos_data, dtype, shape, strides), (sin_data, *sin_layout) = views
    if sin_layout != [dtype, shape, strides]:
        raise RopeError(6, f"{names[1]} (dtype {sin.dtype}, shape {tuple(sin_layout[1])}, strides {sin_layout[2]}) "
                           f"differs from {names[0]} (dtype {cos.dtype}, shape {tuple(shape)}, strides {strides}): "
                           "the two tables share one dtype, shape and strides")
    if len(shape) != 2 or shape[1] < pairs:
        raise RopeError(6, f"{names[0]}.shape={tuple(shape)}: [cache_len, n] with n >= rotary_dim/2={pairs}")
    # A row stride of 0 (a broadcast table) would mean rotary_dim/2 to the library.
    if strides[1] != 1 or strides[0] < max(pairs, 1):
        raise RopeError(8, f"{names[0]}.strides={strides} (elements): column stride 1 and row stride >= "
                           f"max(rotary_dim/2, 1)={max(pairs, 1)}")
    return cos_data, sin_data, dtype, shape[0], strides[0]


def _params(q, k, q_out, k_out, positions, offset, style, inverse, source, base, attn_factor, scaling,
            round_cos_sin, rotary_dim, rotary_offset, cos_cache, sin_cache, num_threads, mrope_section, cu_seqlens,
            positions_kind, keep_alive, prepared=False):
    p = _Params()
    p.struct_size = ctypes.sizeof(_Params)
    p.abi_version = _ABI_VERSION
    if style not in _STYLES or source not in _SOURCES:
        raise RopeError(2, f"style={style!r} (half, interleaved) / source={source!r} (cache, compat, precise)")
    p.style = _STYLES[style]
    p.direction = 1 if inverse else 0
    p.rotary_dim = _int(rotary_dim, "rotary_dim", 32)
    p.rotary_offset = _int(rotary_offset, "rotary_offset", 32)
    if k is None and k_out is not None:  # the C ABI ignores k_out without k: here it would go unwritten
        raise RopeError(1, "k is None but k_out is given: k_out receives k's rotation; pass k, or drop k_out")
    p.q = _tensor(q, "q")
    p.k = _tensor(k, "k")
    # In place, the library writes q (k) itself: an error names it.
    p.q_out = _tensor(q, "q", writable=True) if q_out is None else _tensor(q_out, "q_out", writable=True)
    if k is not None:
        p.k_out = _tensor(k, "k", writable=True) if k_out is None else _tensor(k_out, "k_out", writable=True)
    if cu_seqlens is not None:  # THD: [total_tokens, heads, head_dim] tensors
        data, kind, shape, strides = _index_view(cu_seqlens, "cu_seqlens")
        if len(shape) != 1 or shape[0] < 1 or strides[0] != 1:
            raise RopeError(6, f"cu_seqlens.shape={tuple(shape)}, strides={strides}: a contiguous 1-D array of "
                               "num_seqs + 1 >= 1 entries")
        p.varlen.cu_seqlens, p.varlen.index_type, p.varlen.num_seqs = data, kind, shape[0] - 1
    _positions(p, positions, offset, positions_kind, mrope_section, prepared)
    if mrope_section is not None:
        if len(mrope_section) != 3:
            raise RopeError(6, f"mrope_section={mrope_section}: three sections (temporal, height, width)")
        p.mrope.sections[:] = [_int(n, f"mrope_section[{i}]", 32) for i, n in enumerate(mrope_section)]
    p.angles.source = _SOURCES[source]
    pairs = (p.rotary_dim or p.q.sizes[3]) // 2
    p.scaling, p.angles.base, p.angles.attn_factor = _scaling(scaling, pairs, keep_alive, base, attn_factor)
    if source != "cache" and (cos_cache is not None or sin_cache is not None):
        raise RopeError(11, f"cos_cache/sin_cache with source={source!r}: the tables are read by source='cache' "
                            "only; pass source='cache' to use them")
    if source == "cache":
        a = p.angles
        a.cos_cache, a.sin_cache, a.cache_dtype, a.cache_len, a.cache_row_stride = _tables(
            cos_cache, sin_cache, ("cos_cache", "sin_cache"), pairs)
    p.round_cos_sin = 1 if round_cos_sin else 0
    p.num_threads = _int(num_threads, "num_threads", 32)
    return p


def _call(function, params):
    report = _Report()
    report.struct_size = ctypes.sizeof(_Report)
    status = function(ctypes.byref(params), ctypes.byref(report))
    if status != 0:
        raise RopeError(status, report.message.decode())
    return report.kernel.decode()


def rope(q, k=None, *, q_out=None, k_out=None, positions=None, offset=0, style="half", inverse=False,
         source="compat", base=None, attn_factor=0.0, scaling=None, round_cos_sin=False, rotary_dim=0,
         rotary_offset=0, cos_cache=None, sin_cache=None, num_threads=0, mrope_section=None, cu_seqlens=None,
         positions_kind=None):
    """Rotates q (and k) with rope_dispatch; in place unless q_out/k_out are given. Returns the kernel's name.

    positions: None (offset + s), a [batch] array of offsets, or a [batch, seq] (one row for every
    sequence: [1, seq]; one sequence: [seq]) table, int32 or int64; with mrope_section ([temporal,
    height, width] pairs, Qwen2-VL), a [3, batch, seq] ([3, 1, seq]; one sequence: [3, seq]) table.
    cu_seqlens (num_seqs + 1 entries): q and k are packed [total_tokens, heads, head_dim] tensors
    (THD) and positions a [total_tokens] table (mrope: [3, total_tokens]) or [num_seqs] offsets. Any other shape is refused. positions_kind ("table" or
    "offsets") says which a 1-D array is; None infers it from the shape, and refuses a THD call with
    num_seqs == total_tokens unless every sequence has one token (prepare(): always refuses it, as
    cu_seqlens may change between calls). scaling: transformers' rope_parameters as a dict ("rope_type",
    "rope_theta", "factor", "original_max_position_embeddings", "max_position_embeddings",
    "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
    "truncate", "attention_factor", "short_factor", "long_factor"; "inv_freq" for rope_type
    "inv_freq"); other keys are refused. "rope_theta" is the base and "attention_factor" the
    attn_factor when those arguments are not given (both given: they must be equal). "dynamic" grows
    from "original_max_position_embeddings", else "max_position_embeddings" (transformers reads the
    config's max_position_embeddings). base None: rope_theta, else 10000.
    """
    keep_alive = []
    params = _params(q, k, q_out, k_out, positions, offset, style, inverse, source, base, attn_factor, scaling,
                     round_cos_sin, rotary_dim, rotary_offset, cos_cache, sin_cache, num_threads, mrope_section,
                     cu_seqlens, positions_kind, keep_alive)
    kernel = _call(_lib.rope_dispatch, params)
    _mark_written(_written_by_rope(q, k, q_out, k_out))
    return kernel


# rope()'s keyword arguments and their defaults, for query() and prepare().
_DEFAULT_ARGUMENTS = dict(q_out=None, k_out=None, positions=None, offset=0, style="half", inverse=False,
                          source="compat", base=None, attn_factor=0.0, scaling=None, round_cos_sin=False,
                          rotary_dim=0, rotary_offset=0, cos_cache=None, sin_cache=None, num_threads=0,
                          mrope_section=None, cu_seqlens=None, positions_kind=None)


def query(q, k=None, **arguments):
    """Validates like rope() and returns the name of the kernel it would run; runs nothing."""
    keep_alive = []
    params = _params(q, k, keep_alive=keep_alive, **{**_DEFAULT_ARGUMENTS, **arguments})
    return _call(_lib.rope_query, params)


class PreparedRope:
    """rope(q, k, **arguments) made once: a plan of the call (rope_plan_create), run by calling the object.

    Building the structs in Python costs tens of microseconds, more than a decode step's kernel, so
    an engine that rotates the same buffers at every step prepares the call once. The plan holds
    the arrays' addresses, shapes and strides as they were at prepare(), and the kernel chosen then:
    their contents (q, k, positions, the cos/sin tables) may change between calls, and each call
    reads them anew (positions are checked again at every call, before anything is written); the
    arrays themselves must not be replaced or resized. The object keeps them alive. `kernel` names
    the kernel a call runs. One object serves one thread at a time (its report buffer is shared by
    its calls).
    """

    def __init__(self, q, k, arguments):
        self._keep_alive = [q, k, arguments]  # the library reads these arrays at every call
        self._plan = None
        params = _params(q, k, keep_alive=self._keep_alive, prepared=True, **{**_DEFAULT_ARGUMENTS, **arguments})
        self._report = _Report()
        self._report.struct_size = ctypes.sizeof(_Report)
        plan = ctypes.c_void_p()
        status = _lib.rope_plan_create(ctypes.byref(params), ctypes.byref(plan), ctypes.byref(self._report))
        if status != 0:  # refuses bad arguments here, running nothing
            raise RopeError(status, self._report.message.decode())
        self._plan = plan
        self.kernel = self._report.kernel.decode()
        self._report_reference = ctypes.byref(self._report)
        self._written = _written_by_rope(q, k, arguments.get("q_out"), arguments.get("k_out"))

    def __call__(self):
        """Rotates, like the rope() call it was prepared from; raises RopeError (touching nothing) if refused."""
        status = _lib.rope_plan_run(self._plan, self._report_reference)
        if status != 0:
            raise RopeError(status, self._report.message.decode())
        _mark_written(self._written)

    def __del__(self, _destroy=_lib.rope_plan_destroy):  # bound now: module globals may be gone at exit
        if getattr(self, "_plan", None):
            _destroy(self._plan)
            self._plan = None


def prepare(q, k=None, **arguments):
    """A PreparedRope of rope(q, k, **arguments): validated now, run by calling it."""
    return PreparedRope(q, k, arguments)


def build_cos_sin_cache(cos, sin, *, rotary_dim, source="compat", base=None, attn_factor=0.0, scaling=None):
    """Fills cos and sin with the cache-source tables of positions 0..cache_len-1 (rope_build_cos_sin_cache):
    writable, disjoint [cache_len, n] arrays of one dtype, shape and strides, n >= rotary_dim/2, column
    stride 1 and row stride >= rotary_dim/2 (rope()'s cos_cache and sin_cache follow the same rules)."""
    keep_alive = []
    spec = _CacheSpec()
    spec.struct_size = ctypes.sizeof(_CacheSpec)
    if source not in ("compat", "precise"):
        raise RopeError(2, f"source={source!r}: the builder computes the tables, 'compat' or 'precise'")
    spec.source = _SOURCES[source]
    spec.rotary_dim = _int(rotary_dim, "rotary_dim", 32)
    pairs = spec.rotary_dim // 2
    spec.scaling, spec.base, spec.attn_factor = _scaling(scaling, pairs, keep_alive, base, attn_factor)
    spec.cos_cache, spec.sin_cache, spec.cache_dtype, spec.cache_len, spec.cache_row_stride = _tables(
        cos, sin, ("cos", "sin"), pairs, writable=True)
    kernel = _call(_lib.rope_build_cos_sin_cache, spec)
    _mark_written(_written_torch_tensors(cos, sin))
    return kernel
