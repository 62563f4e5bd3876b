"""The tokenizers library's own answers for test_tokenizer.py, run in the venv of
scripts/tokenizers-venv.sh (this test venv has no `tokenizers`).

  make FOLDER        trains two small SentencePiece-style tokenizers on tests/e2e's Unicode
                     samples and prose (tests/e2e/tokenizer_oracle.py's recipe: byte fallback,
                     <0xNN> at ids 3..258) and saves them with the decoders their families use:
                     llama2.json (Prepend/Replace normalizer; decoder Replace "▁"→" ", ByteFallback,
                     Fuse, Strip one leading space) and metaspace.json (Metaspace pre-tokenizer and
                     decoder, prepend_scheme "first"); plus plain.json, the llama2 file without a
                     decoder. Prints {name: path}.
  answer -           reads REQUEST from stdin, JSON {"tokenizer": path, "texts": [str], "decode": [[id]]}; prints
                     {"ids": [encode(text, add_special_tokens=False).ids],
                      "decoded": [decode(ids, skip_special_tokens=False)],
                      "decoded_skipping": [decode(ids, skip_special_tokens=True)]}."""
import json
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "tests" / "e2e"))


def make(folder):
    import tokenizer_oracle
    from tokenizers import Tokenizer

    corpus = os.path.join(folder, "corpus")
    os.makedirs(corpus, exist_ok=True)
    text = "\n".join(tokenizer_oracle.UNICODE_SAMPLES * 3 + [" ".join(tokenizer_oracle.WORDS)] * 20)
    with open(os.path.join(corpus, "samples.txt"), "w", encoding="utf-8") as out:
        out.write(text)
    llama2, metaspace = tokenizer_oracle.train_sentencepiece(corpus, vocab_size=600)
    specs = {"plain": json.loads(llama2.to_str())}
    specs["llama2"] = dict(specs["plain"], decoder={"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})
    specs["metaspace"] = dict(json.loads(metaspace.to_str()),
                              decoder={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True})
    paths = {}
    for name, spec in specs.items():
        paths[name] = os.path.join(folder, f"{name}.json")
        Tokenizer.from_str(json.dumps(spec)).save(paths[name])
    print(json.dumps(paths))


def answer(request):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(request["tokenizer"])
    print(json.dumps({
        "ids": [tok.encode(t, add_special_tokens=False).ids for t in request["texts"]],
        "decoded": [tok.decode(ids, skip_special_tokens=False) for ids in request["decode"]],
        "decoded_skipping": [tok.decode(ids, skip_special_tokens=True) for ids in request["decode"]],
    }))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        answer(json.loads(sys.stdin.read()))
