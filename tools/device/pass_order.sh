# Sourced by the device A/B scripts. pass_order PASS BUILD...: the builds in the order pass PASS runs
# them, one per line: as given on odd passes, reversed on even ones, so that the host's drift and
# the second-in-a-pass penalty (docs/perf/experts.md, session 15) fall on every build alike.
pass_order() {
  local pass=$1
  shift
  local builds=("$@") i
  if ((pass % 2 == 0)); then
    for ((i = ${#builds[@]} - 1; i >= 0; i--)); do echo "${builds[i]}"; done
  else
    printf '%s\n' "${builds[@]}"
  fi
}
