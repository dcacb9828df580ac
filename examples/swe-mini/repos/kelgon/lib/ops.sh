# kelgon: small shell helpers (POSIX sh)

triple() {
  echo $((3 * $1))
}

total() {
  x=$1 y=$2
  echo $(($x - $y))
}
