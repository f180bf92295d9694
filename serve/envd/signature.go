package envd

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signature is the v1 signature of a /files URL (what the SDKs' uploadUrl
// and downloadUrl carry instead of the access token): v1_ and the
// unpadded base64 of sha256("<path>:<read|write>:<user>:<token>[:<exp>]").
func Signature(path, op, user, token string, exp int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		raw += ":" + strconv.FormatInt(exp, 10)
	}
	h := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(h[:]), "=")
}

// CheckSignature says whether a /files request carries a valid,
// unexpired signature for token.
func CheckSignature(r *http.Request, token string, now time.Time) bool {
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" || token == "" {
		return false
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	var exp int64
	if v := q.Get("signature_expiration"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || now.Unix() > n {
			return false
		}
		exp = n
	}
	want := Signature(q.Get("path"), op, q.Get("username"), token, exp)
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
}
