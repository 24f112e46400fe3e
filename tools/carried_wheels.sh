# shellcheck shell=bash
# Sourced by the H200 scripts (tools/h200_evidence.sh, tools/h200_model_runs.sh): packages the
# device image lacks (datasets and its dill / multiprocess, for GSM8K) travel as wheels in
# .whl/ (carry it; /work/.library/device/README.md). They are installed into /tmp/site, beside
# the image's packages, not over them, and put on PYTHONPATH after the source tree.
# Needs PY (the interpreter) and the repository root as the working directory.
install_carried_wheels() {
    compgen -G ".whl/*.whl" > /dev/null || return 0
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || { echo "cannot install the carried wheels in .whl/" >&2; return 1; }
    export PYTHONPATH=$PWD:/tmp/site
}
