# shellcheck shell=bash
# bench/variants.sh: what a benchmark variant runs, for the torch benchmarks under bench/
# (tradeoff.sh, torch_vs_ddp.sh, accuracy_seeds.sh). Sourced, not run.
#
# A variant is NAME or NAME:OPTION=VALUE[+OPTION=VALUE...].
#   ddp                                    torch DDP (Gloo on the CPU), examples/torch/train.py --ddp
#   ddp:hook=fp16                          DDP with torch's fp16_compress_hook (--ddp-hook fp16)
#   ddp:hook=powersgd+rank=R[+start=K]     DDP with torch's powerSGD_hook, matrix approximation
#                                          rank R >= 1, compressing from step K >= 2 (default 10,
#                                          train.py's); error feedback and warm start on
#   ALGORITHM[:OPTION=VALUE...]            a Bagua algorithm, its options as BAGUA_* variables
#                                          (variant_env)
# ddp takes exactly these options: anything else is refused with the accepted forms.
#
#   variant_is_ddp SPEC                      true for ddp and ddp:...
#   ddp_variant_args SPEC WHO                train.py's arguments for a DDP variant, one a line;
#                                            a bad spec: a message prefixed "WHO:", status 2
#   variant_env BUILD SPEC WHO               the BAGUA_* words ("VAR=VALUE", one a line) of a
#                                            Bagua variant with options; nothing for a plain name

VARIANTS_PY=/usr/bin/python3
DDP_VARIANTS_ACCEPTED="ddp, ddp:hook=fp16, ddp:hook=powersgd+rank=R[+start=K] (R >= 1, K >= 2)"

variant_is_ddp() { [ "$1" = ddp ] || [[ $1 == ddp:* ]]; }

ddp_variant_args() {
  local spec=$1 who=$2 o k v hook= rank= start= parts=()
  _ddp_bad() {
    echo "$who: variant \"$spec\": $1; accepted: $DDP_VARIANTS_ACCEPTED" >&2
  }
  if [ "$spec" = ddp ]; then
    echo --ddp
    return 0
  fi
  [[ $spec == ddp:* ]] || { _ddp_bad "not a DDP variant"; return 2; }
  [ -n "${spec#ddp:}" ] || { _ddp_bad "no option after \"ddp:\""; return 2; }
  IFS=+ read -ra parts <<<"${spec#ddp:}"
  for o in "${parts[@]}"; do
    [[ $o == *=* ]] || { _ddp_bad "option \"$o\" has no =VALUE"; return 2; }
    k=${o%%=*} v=${o#*=}
    case $k in
      hook | rank | start)
        [ -z "${!k}" ] || { _ddp_bad "option \"$k\" given twice"; return 2; }
        [ -n "$v" ] || { _ddp_bad "option \"$k\" has an empty value"; return 2; }
        printf -v "$k" %s "$v" ;;
      *) _ddp_bad "ddp has no option \"$k\" (torch DDP takes only its communication hook)"
         return 2 ;;
    esac
  done
  case $hook in
    fp16)
      [ -z "$rank$start" ] ||
        { _ddp_bad "rank and start are options of hook=powersgd, not of hook=fp16"; return 2; }
      printf '%s\n' --ddp --ddp-hook fp16 ;;
    powersgd)
      [ -n "$rank" ] || { _ddp_bad "hook=powersgd needs rank=R"; return 2; }
      [[ $rank =~ ^[1-9][0-9]*$ ]] ||
        { _ddp_bad "rank=$rank is not an integer of 1 or more"; return 2; }
      [ -z "$start" ] || [[ $start =~ ^([2-9]|[1-9][0-9]+)$ ]] ||
        { _ddp_bad "start=$start is not an integer of 2 or more (torch's PowerSGD with error feedback and warm start)"
          return 2; }
      printf '%s\n' --ddp --ddp-hook powersgd --powersgd-rank "$rank" \
        ${start:+--powersgd-start "$start"} ;;
    "") _ddp_bad "ddp's options need hook=fp16 or hook=powersgd"; return 2 ;;
    *) _ddp_bad "hook=$hook is not a hook of this benchmark"; return 2 ;;
  esac
}

# bagua.torch_api.algorithms.env_of checks an algorithm's options against libbagua's registry.
variant_env() {
  local build=$1 spec=$2 who=$3
  [[ $spec == *:* ]] || return 0
  PYTHONPATH=$build/python "$VARIANTS_PY" - "$spec" "$who" <<'PY'
import sys
spec, who = sys.argv[1], sys.argv[2]
name, _, opts = spec.partition(":")
try:
    from bagua import _C
    from bagua.torch_api.algorithms import env_of
    options = dict(o.split("=", 1) if "=" in o else (o, None) for o in opts.split("+"))
    bare = [o for o, v in options.items() if v is None]
    if bare:
        raise ValueError(f"option {bare[0]!r} has no =VALUE")
    variables = {o: v for o, v in options.items() if o.startswith("BAGUA_")}
    if "BAGUA_ALGORITHM" in variables:
        raise ValueError("BAGUA_ALGORITHM is the variant's NAME, not an option")
    for var, value in variables.items():
        if _C.param_check(var, value):
            raise ValueError(_C.param_check(var, value))
    env = env_of(name, **{o: v for o, v in options.items() if o not in variables})
    for var, value in {**env, **variables}.items():
        print(f"{var}={value}")
except ValueError as e:
    sys.exit(f"{who}: variant \"{spec}\": {e}")
except ImportError as e:
    sys.exit(f"{who}: variant options need the Python module of --build: {e}")
PY
}
