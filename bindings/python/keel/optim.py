"""What a Python optimizer learns of the tensor it updates, when it asks for one call per tensor.

An optimizer object with `per_tensor = True` (keel.register_optimizer) is called once for each
tensor piece this rank updates, with `tensor=` one of these; with `whole_tensors = True` every
call covers a whole tensor (layouts that split tensors, ZeRO shards or tensor-parallel pieces,
are refused with the reason), which per-matrix methods such as Muon or Adafactor need.
"""
from dataclasses import dataclass
from math import prod


@dataclass(frozen=True)
class TensorPiece:
    """A range of one parameter tensor.

    name: the parameter's name ("h.0.attn.qkv.weight").
    shape: the whole tensor's shape.
    piece_shape, piece_offset: this rank's piece of it, the box starting at piece_offset (they
        differ from shape and zeros only under tensor parallelism).
    offset, size: the call's elements, [offset, offset + size) of the piece in row-major order
        (a ZeRO shard of it; 0 and the piece's size otherwise).
    """

    name: str
    shape: tuple
    piece_shape: tuple
    piece_offset: tuple
    offset: int
    size: int

    @property
    def whole(self):
        """Whether the call's elements are the whole tensor: reshape them to `shape`."""
        return self.offset == 0 and self.size == prod(self.shape)
