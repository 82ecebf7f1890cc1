package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are PEM files of a private CA made for one test: a server
// certificate for 127.0.0.1, ::1 and localhost, and a client certificate
// (for mutual TLS) with common name ClientName. Keys are PKCS#8, which every
// server here (Redis/OpenSSL, PostgreSQL, Kafka's PEM keystore) reads.
type TLSFiles struct {
	Dir                   string
	CA                    string // the CA certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	ClientName            string
	// OtherCA is a second CA that signed nothing here: trusting only it
	// must fail verification.
	OtherCA string
}

// MustTLS generates the files in a fresh temporary directory (removed at
// cleanup), readable by other users: a server running as another user (the
// PostgreSQL server does when the tests run as root) must read them.
// PostgreSQL wants its key private to its account: MustPostgresTLS copies it.
func MustTLS(tb testing.TB, clientName string) TLSFiles {
	tb.Helper()
	dir, err := os.MkdirTemp("", "orderpipe-tls-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	f := TLSFiles{Dir: dir, ClientName: clientName}
	caKey, caCert, caDER := mustCA(tb, "orderpipe test CA")
	f.CA = mustWritePEM(tb, dir, "ca.crt", "CERTIFICATE", caDER, 0o644)
	_, _, otherDER := mustCA(tb, "some other CA")
	f.OtherCA = mustWritePEM(tb, dir, "other-ca.crt", "CERTIFICATE", otherDER, 0o644)

	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	f.ServerCert, f.ServerKey = mustLeaf(tb, dir, "server", server, caCert, caKey)
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: clientName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	f.ClientCert, f.ClientKey = mustLeaf(tb, dir, "client", client, caCert, caKey)
	return f
}

func mustCA(tb testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return key, cert, der
}

func mustLeaf(tb testing.TB, dir, name string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl.SerialNumber = serial(tb)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	// Readable by others: a server running as another user reads it; the
	// directory is private to this test run and removed at cleanup.
	return mustWritePEM(tb, dir, name+".crt", "CERTIFICATE", der, 0o644),
		mustWritePEM(tb, dir, name+".key", "PRIVATE KEY", keyDER, 0o644)
}

func mustWritePEM(tb testing.TB, dir, name, typ string, der []byte, mode os.FileMode) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		tb.Fatal(err)
	}
	return p
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
