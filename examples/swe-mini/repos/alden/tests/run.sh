# runs one test: sh tests/run.sh TEST
. ./lib/ops.sh
. ./tests/cases.sh
"$1"
