#!/bin/sh
# make_certs.sh DIR -- throwaway certificates for the TLS tests, made at test time with the
# openssl command (no private key is committed):
#   DIR/ca.pem                      a test CA
#   DIR/server.pem, DIR/server.key  a server certificate it signed, for localhost, 127.0.0.1
#                                   and ::1
#   DIR/other-ca.pem                a CA that signed nothing the tests serve with
# P-256 keys, valid for two days.
set -eu
cd "$1"
key="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
# shellcheck disable=SC2086 # $key is words
openssl req -x509 $key -subj "/CN=hurray test CA" -days 2 -keyout ca.key -out ca.pem 2>/dev/null
# shellcheck disable=SC2086
openssl req $key -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n' >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
  -extfile server.ext -out server.pem 2>/dev/null
# shellcheck disable=SC2086
openssl req -x509 $key -subj "/CN=another CA" -days 2 -keyout other-ca.key -out other-ca.pem \
  2>/dev/null
rm -f server.csr server.ext ca.srl
