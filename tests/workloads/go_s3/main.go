// A small S3 client on minio-go (over HTTPS when the endpoint is), for the
// object-storage tests: puts N objects, lists them, gets each whole and a
// few by range, and writes what it did as JSON (the ground truth the traced
// requests are checked against).
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

type did struct {
	Puts   [][2]any `json:"puts"`
	Gets   [][2]any `json:"gets"`
	Ranges [][2]any `json:"ranges"`
	Listed int      `json:"listed"`
}

func main() {
	endpoint := flag.String("endpoint", "", "https://HOST:PORT or http://HOST:PORT")
	bucket := flag.String("bucket", "data", "bucket")
	objects := flag.Int("objects", 10, "objects to put and get")
	size := flag.Int("size", 10000, "bytes of the first object (each next one a byte more)")
	ranges := flag.Int("ranges", 3, "range gets of the first objects")
	out := flag.String("out", "", "where to write what was done (JSON)")
	flag.Parse()
	u, err := url.Parse(*endpoint)
	if err != nil || u.Host == "" {
		fmt.Fprintln(os.Stderr, "go_s3: --endpoint https://HOST:PORT")
		os.Exit(2)
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:  credentials.NewStaticV4("testing", "testing", ""),
		Secure: u.Scheme == "https", Region: "us-east-1",
	})
	check(err)
	ctx := context.Background()
	var d did
	for i := 0; i < *objects; i++ {
		key := fmt.Sprintf("go/%03d.bin", i)
		body := make([]byte, *size+i)
		_, _ = rand.Read(body)
		_, err := c.PutObject(ctx, *bucket, key, bytes.NewReader(body), int64(len(body)),
			minio.PutObjectOptions{ContentType: "application/octet-stream"})
		check(err)
		d.Puts = append(d.Puts, [2]any{key, len(body)})
	}
	for o := range c.ListObjects(ctx, *bucket, minio.ListObjectsOptions{Prefix: "go/", Recursive: true}) {
		check(o.Err)
		d.Listed++
	}
	for i := 0; i < *objects; i++ {
		key := fmt.Sprintf("go/%03d.bin", i)
		obj, err := c.GetObject(ctx, *bucket, key, minio.GetObjectOptions{})
		check(err)
		n, err := io.Copy(io.Discard, obj)
		check(err)
		obj.Close()
		d.Gets = append(d.Gets, [2]any{key, n})
	}
	for i := 0; i < *ranges && i < *objects; i++ {
		key := fmt.Sprintf("go/%03d.bin", i)
		opts := minio.GetObjectOptions{}
		check(opts.SetRange(100, 1099))
		obj, err := c.GetObject(ctx, *bucket, key, opts)
		check(err)
		n, err := io.Copy(io.Discard, obj)
		check(err)
		obj.Close()
		d.Ranges = append(d.Ranges, [2]any{key, n})
	}
	if *out != "" {
		b, _ := json.Marshal(d)
		check(os.WriteFile(*out, b, 0o644))
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "go_s3:", err)
		os.Exit(1)
	}
}
