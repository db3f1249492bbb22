#!/usr/bin/env bash
# Puts this checkout in the shape a device run can carry, and back. A device run copies the tracked files
# (at most 64 MiB with what it carries); the tracked tree is about that, most of it the shipped models,
# which no GPU check reads. So for the run the models are taken out of the index (the files stay), the
# libraries the GPU machine lacks are downloaded into .gpu-deps (scripts/gpu-deps.sh), and a pre-commit
# hook refuses commits until `restore` (a commit then would delete the models from the repository).
# Usage: bash scripts/gpu-run.sh prepare   then the device run: carry [".gpu-deps"], command
#                                          `bash scripts/gpu-check.sh` (about 8 minutes)
#        bash scripts/gpu-run.sh restore   the models back in the index, the hook removed
set -euo pipefail
cd "$(dirname "$0")/.."
git_dir=$(git rev-parse --git-dir)
hook="$git_dir/hooks/pre-commit"
marker='# canvas gpu-run: prepared'
case "${1:-}" in
  prepare)
    bash scripts/gpu-deps.sh
    git rm -q --cached --ignore-unmatch 'models/*.gguf'
    grep -qxF '/models/*.gguf' "$git_dir/info/exclude" 2>/dev/null || echo '/models/*.gguf' >> "$git_dir/info/exclude"
    mkdir -p "$git_dir/hooks"
    printf '#!/bin/sh\n%s\necho "canvas: the models are out of the index for a device run: bash scripts/gpu-run.sh restore first" >&2\nexit 1\n' \
      "$marker" > "$hook"
    chmod +x "$hook"
    carried=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    deps=$(du -sb .gpu-deps | cut -f1)
    echo "prepared: the tree a run copies is $carried bytes, .gpu-deps $deps bytes (at most 67108864 together)"
    echo "after the run: bash scripts/gpu-run.sh restore"
    ;;
  restore)
    git reset -q -- models
    sed -i '\#^/models/\*\.gguf$#d' "$git_dir/info/exclude"
    if [ -f "$hook" ] && grep -qxF "$marker" "$hook"; then rm -f "$hook"; fi
    if [ -n "$(git status --porcelain -- models)" ]; then
      git status --short -- models
      echo "restore: models/ differs from HEAD (above)" >&2
      exit 1
    fi
    echo "restored: the models are back in the index"
    ;;
  *)
    echo "usage: bash scripts/gpu-run.sh prepare | restore" >&2
    exit 2
    ;;
esac
