#!/usr/bin/env bash
# Installs Keel to a temporary prefix, builds tests/e2e/out_of_tree_plugin against it with
# find_package(Keel), and trains three steps with that plugin through the installed keel.
set -euo pipefail
build_dir=$1 source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/tests/e2e/out_of_tree_plugin" -B "$work/plugin-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/plugin-build" >/dev/null
plugin_dir="$work/plugin-build/lib/keel/plugins"
# The author's contract and guide are installed, and every installed file a header or the guide
# names (share/doc/keel/...) exists.
doc="$work/prefix/share/doc/keel"
for f in architecture.md plugin-contract.md parallelism.md offload.md metrics.md plugin-authors-guide.md example-localsgd/CMakeLists.txt example-localsgd/localsgd_strategy.cpp; do
  test -f "$doc/$f" || { echo "FAIL: $doc/$f is not installed"; exit 1; }
done
for named in $(grep -rhoE "share/doc/keel/[A-Za-z0-9_./-]+[A-Za-z0-9_-]" "$work/prefix/include" "$doc" | sort -u); do
  test -e "$work/prefix/$named" || { echo "FAIL: $named is named by an installed file but not installed"; exit 1; }
done
if grep -rn "DESIGN\.md" "$work/prefix/include"; then echo "FAIL: installed headers point at DESIGN.md, which is not installed"; exit 1; fi
grep -q "find_dependency(nlohmann_json" "$(find "$work/prefix" -name KeelConfig.cmake | head -1)" ||
  { echo "FAIL: KeelConfig.cmake does not declare Keel::support's nlohmann_json"; exit 1; }
test -f "$plugin_dir/libkeel-signsgd.so"
listing=$("$work/prefix/bin/keel" plugins --plugin-path "$plugin_dir")
echo "$listing"
for name in cpu gpt mlp adamw sgd ddp signsgd; do
  echo "$listing" | grep -qE "^[a-z]+ +$name " || { echo "FAIL: installed keel does not list plugin $name"; exit 1; }
done
"$work/prefix/bin/keel" run "$source_dir/examples/quickstart.json" \
  --set plugin_path="\"$plugin_dir\"" --set optimizer='{"plugin":"signsgd","lr":1e-3}' \
  --set train.steps=3 --set train.log_every=1 --set train.sample_tokens=0 --set data.val_batches=1 \
  --set train.metrics_path="\"$work/metrics.jsonl\"" | tail -3
test "$(wc -l < "$work/metrics.jsonl")" = 3
echo PASS
