"""keel.Tokenizer: the core's tokenizer (keel._keel.Tokenizer, through abi/keel/embed.h), plus
the roles a Hugging Face folder gives its tokens. The spec is "bytes", a tokenizer.json, or a
folder holding one; the end- and start-of-text tokens come from the folder's
tokenizer_config.json when it names them, else from the names the families in use give them
(the same rule export_hf(tokenizer=...) writes into config.json)."""
import os

from keel import _hf_tokenizer_files as _files
from keel._keel import InvalidArgument
from keel._keel import Tokenizer as _ExtensionTokenizer


def _tokenizer_file(spec):
    """(the file the core opens, the folder's tokenizer_config.json or None)."""
    if spec == "bytes":
        return spec, None
    if os.path.isdir(spec):
        side = os.path.join(spec, "tokenizer_config.json")
        path = os.path.join(spec, "tokenizer.json")
        if not os.path.isfile(path):
            raise InvalidArgument(f"keel.Tokenizer: {spec!r} is a folder without a tokenizer.json")
        return path, (side if os.path.isfile(side) else None)
    return spec, None


class Tokenizer(_ExtensionTokenizer):
    __doc__ = _ExtensionTokenizer.__doc__ + (
        "\nspec: \"bytes\", a tokenizer.json, or a Hugging Face folder holding one (its\n"
        "tokenizer_config.json then names eos_token and bos_token). eos_token_id / bos_token_id: the\n"
        "end- and start-of-text ids, None where the tokenizer has none.")

    def __init__(self, spec):
        spec = os.fspath(spec)
        path, side_config = _tokenizer_file(spec)
        super().__init__(path)
        self.path = path
        self.spec = spec  # as given: a folder keeps its side files for export_hf
        side = _files._read_json(side_config, _files.SIDE_FILE_LIMIT_BYTES) if side_config else {}
        self.eos_token = self._role(side, "eos_token", _files.END_OF_TEXT, side_config)
        self.bos_token = self._role(side, "bos_token", _files.START_OF_TEXT, side_config)
        if self.bos_token is None and self.eos_token == "<|endoftext|>":  # GPT-2's one token opens and ends a text
            self.bos_token = self.eos_token
        self.eos_token_id = None if self.eos_token is None else self.token_to_id(self.eos_token)
        self.bos_token_id = None if self.bos_token is None else self.token_to_id(self.bos_token)

    def _role(self, side, role, usual_names, side_config):
        if self.path == "bytes":
            return None
        named = _files._configured(side, role)
        if named is not None:
            if self.token_to_id(named) is None:
                raise InvalidArgument(f"{side_config}: {role} {named!r} is not a token of {self.path}")
            return named
        return next((name for name in usual_names if self.token_to_id(name) is not None), None)

    def __repr__(self):
        return f"keel.Tokenizer({self.path!r}, vocab_size={self.vocab_size}, eos_token_id={self.eos_token_id})"
