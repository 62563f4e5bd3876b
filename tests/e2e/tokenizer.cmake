# End-to-end tests of `keel prepare-data --tokenizer` (included from tests/e2e/CMakeLists.txt;
# the checks are in tokenizer_checks.py). The oracle test trains tokenizers with PyPI's
# `tokenizers` in the venv of scripts/tokenizers-venv.sh and compares ids token for token
# (skipped, code 77, when PyPI is out of reach); the refusals need only the keel executable.
set(tokenizer_checks ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/tokenizer_checks.py)
add_test(NAME e2e.tokenizer.matches_hf_tokenizers
  COMMAND ${tokenizer_checks} oracle --keel $<TARGET_FILE:keel> --config ${PROJECT_SOURCE_DIR}/examples/quickstart.json
          --venv ${CMAKE_BINARY_DIR}/tokenizers-venv)
set_tests_properties(e2e.tokenizer.matches_hf_tokenizers PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
add_test(NAME e2e.tokenizer.edges_match_hf_tokenizers
  COMMAND ${tokenizer_checks} edges --keel $<TARGET_FILE:keel> --venv ${CMAKE_BINARY_DIR}/tokenizers-venv)
set_tests_properties(e2e.tokenizer.edges_match_hf_tokenizers PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
add_test(NAME e2e.tokenizer.folder_skips_text_not_utf8 COMMAND ${tokenizer_checks} folder_text --keel $<TARGET_FILE:keel>)
add_test(NAME e2e.tokenizer.document_out_of_memory COMMAND ${tokenizer_checks} out_of_memory --keel $<TARGET_FILE:keel>)
add_test(NAME e2e.refuses.tokenizer_base_file_accepted COMMAND ${tokenizer_checks} base_accepted --keel $<TARGET_FILE:keel>)

# keel_tokenizer_refusal(CASE PATTERN): prepare-data with the base tokenizer.json broken as CASE
# (tokenizer_checks.py REFUSAL_CASES) must exit 1 with a message matching PATTERN.
function(keel_tokenizer_refusal case pattern)
  add_test(NAME e2e.refuses.tokenizer_${case}
    COMMAND ${tokenizer_checks} refuse --keel $<TARGET_FILE:keel> --case ${case} --pattern "${pattern}")
endfunction()
set(expected_types "expected \"Sequence\", \"Prepend\" or \"Replace\"")
keel_tokenizer_refusal(nfkc_normalizer "tokenizer.json: normalizer.type \"NFKC\" is not supported; ${expected_types}")
keel_tokenizer_refusal(nested_unknown_normalizer "normalizer.normalizers\\[1\\].type \"Lowercase\" is not supported")
keel_tokenizer_refusal(regex_replace "normalizer.pattern must be {\"String\": ...}: a Regex pattern in a Replace normalizer is not supported")
keel_tokenizer_refusal(whitespace_pre_tokenizer "pre_tokenizer.type \"Whitespace\" is not supported; expected \"Sequence\", \"ByteLevel\", \"Split\" or \"Metaspace\"")
keel_tokenizer_refusal(split_contiguous "pre_tokenizer.pretokenizers\\[0\\].behavior \"Contiguous\" is not supported")
keel_tokenizer_refusal(bad_regex "pre_tokenizer.pattern.Regex: the regex does not compile \\(PCRE2, at pattern offset 7\\): missing closing parenthesis")
keel_tokenizer_refusal(byte_level_not_last "pre_tokenizer has a ByteLevel step before another step")
keel_tokenizer_refusal(wordpiece_model "model.type \"WordPiece\" is not supported; expected \"BPE\"")
keel_tokenizer_refusal(unigram_model "model.type \"Unigram\" is not supported; expected \"BPE\"")
keel_tokenizer_refusal(dropout "model.dropout must be null")
keel_tokenizer_refusal(subword_prefix "model.continuing_subword_prefix is not supported")
keel_tokenizer_refusal(duplicate_id "model.vocab.he repeats id 0 of \"!\"")
keel_tokenizer_refusal(negative_id "model.vocab.! is -1, outside the ids this reader accepts \\[0, 16777216\\)")
keel_tokenizer_refusal(huge_id "model.vocab.! is 1099511627776, outside the ids")
keel_tokenizer_refusal(fractional_id "model.vocab.! must be a token id \\(an integer\\), found a number")
keel_tokenizer_refusal(long_token "model.vocab has a token of 5000 bytes, more than the 4096 allowed")
keel_tokenizer_refusal(merge_unknown_token "model.merges\\[3\\] names \"zz\", which is not in model.vocab")
keel_tokenizer_refusal(merge_result_unknown "model.merges\\[3\\] makes \"!!\", which is not in model.vocab")
keel_tokenizer_refusal(merge_bad_form "model.merges\\[3\\] must be two tokens separated by one space")
keel_tokenizer_refusal(merge_repeated "model.merges\\[3\\] repeats an earlier merge")
keel_tokenizer_refusal(unknown_unk "model.unk_token \"<unk>\" is not in model.vocab")
keel_tokenizer_refusal(unknown_model_key "model.frobnicate is not supported by Keel's tokenizer.json reader")
keel_tokenizer_refusal(unknown_top_key "tokenizer.json: frobnicate is not supported")
keel_tokenizer_refusal(added_lstrip "added_tokens\\[0\\].lstrip true is not supported")
keel_tokenizer_refusal(added_duplicate_id "added_tokens\\[1\\].id repeats id 100 of an earlier added token")
keel_tokenizer_refusal(added_id_clash "added_tokens\\[0\\].id repeats id 0 of model.vocab's \"!\"")
keel_tokenizer_refusal(added_empty "added_tokens\\[0\\].content must not be empty")
keel_tokenizer_refusal(truncated "tokenizer.json: not valid JSON")
keel_tokenizer_refusal(too_deep "tokenizer.json: JSON nested deeper than 128 levels")
keel_tokenizer_refusal(not_utf8_document "doc.txt: byte offset 7: not valid UTF-8")
keel_tokenizer_refusal(character_outside_vocabulary "doc.txt: the character U\\+00E9 is not in the tokenizer's vocabulary, which has no unk_token")
keel_tokenizer_refusal(folder_as_tokenizer "tokenizer file is a folder; expected a regular file")
keel_tokenizer_refusal(missing_tokenizer "absent.json: cannot open tokenizer file")
