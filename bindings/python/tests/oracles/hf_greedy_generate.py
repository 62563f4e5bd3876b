"""Runs in the transformers venv (scripts/hf-venv.sh): loads an export folder as transformers
does, generates greedily from each prompt, and prints JSON: the new ids per prompt, whatever
transformers warned or logged while loading and generating, and the generation config's
eos/pad ids. Usage: python hf_greedy_generate.py FOLDER '{"prompts": [[ids]], "new_tokens": n}'"""
import io
import json
import logging
import sys
import warnings

import torch
import transformers

folder, request = sys.argv[1], json.loads(sys.argv[2])
log = io.StringIO()
handler = logging.StreamHandler(log)
transformers.logging.get_logger().addHandler(handler)
transformers.logging.set_verbosity_warning()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    generated = []
    for prompt in request["prompts"]:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=request["new_tokens"])
        generated.append(out[0, len(prompt):].tolist())
print(json.dumps({"generated": generated,
                  "warnings": [str(w.message) for w in caught] + [line for line in log.getvalue().splitlines() if line],
                  "eos_token_id": model.generation_config.eos_token_id,
                  "pad_token_id": model.generation_config.pad_token_id}))
