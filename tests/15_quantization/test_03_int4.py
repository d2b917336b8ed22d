"""Module 15, section 6: two 4-bit values per byte."""
import numpy as np
import pytest

from tinytorch.perf.quantization import pack_int4, unpack_int4


def test_layout_low_nibble_first():
    packed = pack_int4(np.array([3, -2], np.int8))
    assert packed.dtype == np.uint8 and packed.tolist() == [0xE3], (
        f"[3, -2] packs to the byte 0xE3 (3 in the LOW nibble, -2 = 1110 in the high one), got {packed.tolist()}")
    assert pack_int4(np.array([[1, 2, 3, 4]], np.int8)).tolist() == [[0x21, 0x43]]


def test_every_int4_value_round_trips():
    every = np.arange(-8, 8, dtype=np.int8)
    grid = np.stack([np.repeat(every, 16), np.tile(every, 16)], axis=-1).reshape(16, 32)  # every pair, both orders
    back = unpack_int4(pack_int4(grid), 32)
    assert back.dtype == np.int8 and np.array_equal(back, grid), (
        f"every value -8..7 must survive pack/unpack; {np.sum(back != grid)} differ, e.g. {grid[back != grid][:4]} -> "
        f"{back[back != grid][:4]} (sign-extend each nibble: (n ^ 8) - 8; without it -1 comes back as 15)")


def test_every_uint4_value_round_trips_and_odd_lengths():
    unsigned = np.arange(16, dtype=np.uint8)
    assert unpack_int4(pack_int4(unsigned), 16, signed=False).tolist() == unsigned.tolist()
    odd = np.array([[1, -1, 7], [-8, 0, 5]], np.int8)
    assert pack_int4(odd).shape == (2, 2), "three values need two bytes (one 0 of padding)"
    assert np.array_equal(unpack_int4(pack_int4(odd), 3), odd)


def test_input_checks():
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack_int4(np.array([9, -9], np.int16))
    with pytest.raises(ValueError, match="integer"):
        pack_int4(np.array([0.5]))
    with pytest.raises(ValueError, match="uint8"):
        unpack_int4(np.array([1], np.int8), 2)
    with pytest.raises(ValueError, match="values"):
        unpack_int4(np.array([1, 2], np.uint8), 7)
