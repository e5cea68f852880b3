// Package fdlimit checks the process's open-file limit at start, where a
// limit too low for the expected connections and files can still be
// reported before it makes accepts and opens fail.
package fdlimit
