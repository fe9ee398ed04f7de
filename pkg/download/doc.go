// Package download fetches Hugging Face Hub snapshots into the Hugging Face
// cache layout ($HF_HOME/hub/models--org--name/{blobs,snapshots,refs}), so the
// converter can read them and other tools can reuse them.
//
// It is built around the failure modes that corrupt or hang real Hub
// downloads (see docs/hf-download.md §2.5):
//
//   - Every file is fetched as length-checked Range chunks (64 MiB, 3 in
//     flight by default) over HTTP/1.1 only. A 200 to a ranged request, a
//     wrong Content-Range, or a short or long body is never written at an
//     offset: the chunk is retried from its start.
//   - A stall floor (fewer than StallBytes over StallWindow) aborts a
//     connection that trickles; an idle timer would not.
//   - Chunks are written with WriteAt into a preallocated temporary file and
//     journaled with their sha256; a resumed download re-hashes journaled
//     chunks before trusting them, so nothing is ever appended to a prefix.
//   - Every file is verified (LFS sha256 or git blob sha1, and size) before it
//     gets its final name; a mismatch deletes the temporary file.
//   - The token is sent only to the Hub endpoint's host, never to the CDN.
//   - No retry is silent (Client.OnRetry), and a host that cannot be reached
//     is a *NetworkError naming the cause class (DNS, connection refused,
//     timeout, TLS) and the attempts made.
//   - Offline (Client.Offline, HF_HUB_OFFLINE=1) no request is made at all:
//     Snapshot resolves refs/<revision> and reads snapshots/<commit> from the
//     cache, or says exactly what the cache lacks (*OfflineError).
package download
