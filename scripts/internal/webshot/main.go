// Command webshot drives serve's web page in headless Chromium through
// one streamed reply per theme and saves screenshots of it: the live panel
// while the reply streams, and the chat once it is done
// (scripts/webui-screenshots.sh runs it; docs/server.md shows them).
//
//	webshot -url http://127.0.0.1:18778/ -out docs/img
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18778/", "the page")
	out := flag.String("out", "docs/img", "folder for the PNG files")
	message := flag.String("message", "What does an expert cache do while a mixture-of-experts model decodes?", "the message to send")
	minTokens := flag.Int("live-after", 12, "take the live panel's shot once this many tokens streamed")
	flag.Parse()
	if err := run(*url, *out, *message, *minTokens); err != nil {
		fmt.Fprintln(os.Stderr, "webshot:", err)
		os.Exit(1)
	}
}

func chrome() (string, error) {
	if p := os.Getenv("NVMAI_CHROME"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium found: install it (apt-get install chromium) or set NVMAI_CHROME")
}

func run(url, out, message string, minTokens int) error {
	path, err := chrome()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, theme := range []string{"light", "dark"} {
		if err := shoot(path, url, out, theme, message, minTokens); err != nil {
			return fmt.Errorf("%s theme: %w", theme, err)
		}
	}
	return nil
}

func shoot(chromePath, url, out, theme, message string, minTokens int) error {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromePath), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 820), chromedp.Flag("disable-gpu", true), chromedp.Flag("hide-scrollbars", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The page follows the system's theme (prefers-color-scheme).
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: theme}}}); err != nil {
		return err
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 820), chromedp.Navigate(url)); err != nil {
		return err
	}
	if err := wait(ctx, "the page", `document.body.dataset.ready === '1'`, 30*time.Second); err != nil {
		return err
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("input"), message+kb.Enter)); err != nil {
		return err
	}
	// The live panel shows the server's latest generation: wait for this
	// reply's, well under way.
	streaming := fmt.Sprintf(`document.body.classList.contains('busy') && document.getElementById('live-state').textContent === 'generating' && Number(document.getElementById('live-tokens').dataset.raw) >= %d`, minTokens)
	if err := wait(ctx, "the reply to stream", streaming, 5*time.Minute); err != nil {
		return err
	}
	live, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.ID("live")))
	if err != nil {
		return err
	}
	if err := save(filepath.Join(out, "webui-live-"+theme+".png"), live); err != nil {
		return err
	}
	// The end of the reply, and the live panel's event that counted it.
	ended := `!document.body.classList.contains('busy') && document.getElementById('live-state').textContent === 'idle' && document.getElementById('live-prefill').dataset.raw !== undefined`
	if err := wait(ctx, "the reply to end", ended, 10*time.Minute); err != nil {
		return err
	}
	chat, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		return err
	}
	return save(filepath.Join(out, "webui-chat-"+theme+".png"), chat)
}

// wait polls expr from Go (chromedp.Poll builds a function with new
// Function, which the page's Content-Security-Policy forbids).
func wait(ctx context.Context, what, expr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s: %v", within, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// save writes b to path through a temporary file, so a failed run leaves
// no half-written image.
func save(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %d KB\n", path, len(b)/1024)
	return os.Rename(tmp, path)
}
