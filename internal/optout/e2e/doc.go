// Package e2e holds the opt-out page's end-to-end test in a real headless Chromium
// (chromedriver over loopback) against a real PostgreSQL; without chromium and
// chromedriver it skips with the reason.
package e2e
