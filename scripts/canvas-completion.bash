# bash completion for canvas: subcommands, then the options a subcommand's --help lists, then files.
_canvas() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "generate chat logits inspect score train sudoku convert quantize bench help --version --help" -- "$cur"))
    return
  fi
  local cmd=${COMP_WORDS[1]}
  if [[ $cmd == help ]]; then
    COMPREPLY=($(compgen -W "generate chat logits inspect score train sudoku convert quantize bench" -- "$cur"))
    return
  fi
  if [[ $cmd == sudoku && $COMP_CWORD -eq 2 ]]; then
    COMPREPLY=($(compgen -W "generate solve eval probe" -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    # The options come from the binary's own --help, so completion never drifts from the option tables.
    local help
    if [[ $cmd == sudoku ]]; then
      help=$("${COMP_WORDS[0]}" sudoku "${COMP_WORDS[2]}" --help 2>/dev/null)
    else
      help=$("${COMP_WORDS[0]}" "$cmd" --help 2>/dev/null)
    fi
    COMPREPLY=($(compgen -W "$(grep -oE -- '(^|[ ,])--?[a-zA-Z][-a-zA-Z0-9]*' <<<"$help" | tr -d ' ,' | sort -u)" -- "$cur"))
    return
  fi
  COMPREPLY=($(compgen -f -- "$cur"))
}
complete -o filenames -F _canvas canvas
