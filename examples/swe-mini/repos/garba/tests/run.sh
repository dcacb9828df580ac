# runs one test: sh tests/run.sh TEST
. ./lib/calc.sh
. ./tests/cases.sh
"$1"
