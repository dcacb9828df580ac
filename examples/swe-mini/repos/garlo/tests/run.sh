# runs one test: sh tests/run.sh TEST
. ./lib/numeric.sh
. ./tests/cases.sh
"$1"
