# cornu: small shell helpers (POSIX sh)

succ() {
  echo $(($1 + 1))
}

combine() {
  price=$1 tax=$2
  echo $(($price - $tax))
}
