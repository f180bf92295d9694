// Package randid makes random identifiers of lower-case letters and
// digits, the shape of sandbox ids (E2B's and gvx's).
package randid

import "crypto/rand"

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// New is prefix and n random letters and digits.
func New(prefix string, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b)
}
