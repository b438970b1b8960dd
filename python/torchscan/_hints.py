"""What to change when a model's forward rejects its inputs: the hints the `torchscan` command
and `crawl_module`/`summary` give for the common mistakes (floating-point inputs to a model that
takes token ids; a batch dimension given twice, or a shape missing one).

The mistakes are told apart by the forward's error text, which is PyTorch's own (embedding's
"indices" check, convolution's "Expected 3D (unbatched) or 4D (batched) input ... input of
size"); each caller spells the fix in its own terms (`--dtype int64` on the command line,
`dtype=torch.int64` in Python), and the rest of the sentence is shared.
"""

from __future__ import annotations

__all__ = ["TOKEN_IDS", "batch_hint", "looks_like_a_shape_error", "looks_like_float_token_ids"]

# Words of the errors a floating input to an embedding (or another index operator) raises.
_TOKEN_ID_WORDS = ("indices", "Long, Int", "Expected tensor for argument #1")
# Words of the errors a tensor of the wrong rank or size raises (a 2-D image read as one
# unbatched channel: "expected input[1, 1, 224, 224] to have 3 channels").
_SHAPE_WORDS = ("input of size", "Expected", "dimension", "shape", "channels")

TOKEN_IDS = "the model seems to take integer inputs (token ids): give {fix}"


def looks_like_float_token_ids(error: BaseException, floating_inputs: bool) -> bool:
    """Whether `error` is a floating-point tensor given where token ids (integers) belong."""
    text = str(error)
    return floating_inputs and any(word in text for word in _TOKEN_ID_WORDS)


def looks_like_a_shape_error(error: BaseException) -> bool:
    """Whether `error` is about the rank or size of an input."""
    text = str(error)
    return any(word in text for word in _SHAPE_WORDS)


def batch_hint(what: str, added: str, example: str) -> str:
    """`what` (SHAPE, input_shape) is given without the batch dimension, which `added` adds."""
    return f"each {what} is given without the batch dimension, which {added} adds: for an image model, {example}"
