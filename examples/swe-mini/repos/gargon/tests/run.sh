# runs one test: sh tests/run.sh TEST
. ./lib/mathx.sh
. ./tests/cases.sh
"$1"
