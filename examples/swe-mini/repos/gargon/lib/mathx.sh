# gargon: small shell helpers (POSIX sh)

succ() {
  echo $(($1 + 1))
}

plus() {
  x=$1 y=$2
  echo $(($x - $y))
}
