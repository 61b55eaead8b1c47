// The Go side of bench/go_tls_cost.py: request/reply pairs of 200 bytes over
// crypto/tls on loopback, the server in the same process (so each pair is
// four TLS calls: the client's Write and Read, the server's Read and Write).
//
//	go_tls_loop loop N    N pairs; prints wall and CPU seconds per pair
//	go_tls_loop sleep S   sleeps S seconds (a traced process that runs this
//	                      binary, so that its probes are attached)
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"os"
	"strconv"
	"syscall"
	"time"
)

func cert() tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func cpu() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go_tls_loop loop N | sleep S")
		os.Exit(2)
	}
	n, _ := strconv.Atoi(os.Args[2])
	if os.Args[1] == "sleep" {
		time.Sleep(time.Duration(n) * time.Second)
		return
	}
	req := make([]byte, 200)
	copy(req, "GET /bucket/key HTTP/1.1\r\nHost: bench\r\n\r\n")
	reply := make([]byte, 200)
	copy(reply, "HTTP/1.1 200 OK\r\nContent-Length: 150\r\n\r\n")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert()}})
	if err != nil {
		panic(err)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 200)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			c.Write(reply)
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 200)
	t0, c0 := time.Now(), cpu()
	for i := 0; i < n; i++ {
		c.Write(req)
		if _, err := io.ReadFull(c, buf); err != nil {
			panic(err)
		}
	}
	fmt.Println(time.Since(t0).Seconds()/float64(n), (cpu()-c0)/float64(n))
}
