"""transformers' own apply_chat_template for test_chat.py, run in the venv of scripts/hf-venv.sh
(this test venv has no transformers). Reads JSON from stdin: {"tokenizer": tokenizer.json,
"special": {"bos_token": ..., ...}, "template": str, "conversations": [[{"role", "content"}]]};
prints {"ids": [apply_chat_template(messages, tokenize=True)]}."""
import json
import sys

from transformers import PreTrainedTokenizerFast

request = json.load(sys.stdin)
tokenizer = PreTrainedTokenizerFast(tokenizer_file=request["tokenizer"], **request["special"])
tokenizer.chat_template = request["template"]
ids = [tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=False)
       for messages in request["conversations"]]
print(json.dumps({"ids": ids}))
