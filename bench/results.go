package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Every benchmark's results follow one life cycle: steps are appended to a
// run file (addStep), the run is published into a results directory as
// <id>.json, and a README section between two markers is rewritten from
// the latest run and the directory's history (publishRun). The helpers
// here hold that life cycle once; each benchmark brings its own types and
// rendering.

// readJSON decodes the JSON file at path; what names it in errors.
func readJSON[T any](path, what string) (*T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s %q: %w", what, path, err)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("cannot decode %s %q: %w", what, path, err)
	}
	return &v, nil
}

// writeJSON writes v to path, indented, through a temporary file.
func writeJSON(path, what string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("cannot encode %s %q: %w", what, path, err)
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// readOrNew is readJSON, or a zero T when path does not exist yet.
func readOrNew[T any](path, what string) (*T, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return new(T), nil
	} else if err != nil {
		return nil, fmt.Errorf("cannot stat %s %q: %w", what, path, err)
	}
	return readJSON[T](path, what)
}

// readAllJSON reads every *.json in dir, ordered by id.
func readAllJSON[T any](dir, what string, id func(*T) string) ([]*T, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var all []*T
	for _, p := range paths {
		v, err := readJSON[T](p, what)
		if err != nil {
			return nil, err
		}
		all = append(all, v)
	}
	sort.Slice(all, func(i, j int) bool { return id(all[i]) < id(all[j]) })
	return all, nil
}

// checkRunID refuses ids that are not plain file names.
func checkRunID(id string) error {
	if id == "" || strings.ContainsAny(id, `/\`) {
		return fmt.Errorf("run id %q is not a file name", id)
	}
	return nil
}

// replaceBetween returns doc with the text between start and end replaced
// by section; ErrNoMarkers if they are not both there, in that order.
func replaceBetween(doc, start, end, section string) (string, error) {
	i := strings.Index(doc, start)
	if i < 0 {
		return "", ErrNoMarkers
	}
	j := strings.Index(doc[i:], end)
	if j < 0 {
		return "", ErrNoMarkers
	}
	j += i
	return doc[:i+len(start)] + "\n" + strings.TrimSpace(section) + "\n" + doc[j:], nil
}

// updateREADME rewrites the section of readme between start and end.
func updateREADME(readme, start, end, section string) error {
	doc, err := os.ReadFile(readme)
	if err != nil {
		return fmt.Errorf("cannot read %q: %w", readme, err)
	}
	out, err := replaceBetween(string(doc), start, end, section)
	if err != nil {
		return fmt.Errorf("cannot update %q: %w", readme, err)
	}
	return writeFileAtomic(readme, []byte(out))
}

// relTo is target relative to the README's directory, slash-separated.
func relTo(readme, target string) string {
	rel, err := filepath.Rel(filepath.Dir(readme), target)
	if err != nil {
		rel = target
	}
	return filepath.ToSlash(rel)
}

// publishRun is the shared part of PublishAgent and PublishFanout: the run
// in cfg.RunPath gets cfg's id, date, host and command (set), optional
// derived figures (finish), is written to cfg.ResultsDir/<id>.json, and the
// README section between start and end is rendered from it and the
// directory's history. It returns the path of the results file.
func publishRun[T any](cfg PublishConfig, what, start, end string, set func(*T), finish func(*T), id func(*T) string,
	render func(latest *T, resultsDir string, history []*T) string) (string, error) {
	if err := checkRunID(cfg.ID); err != nil {
		return "", err
	}
	r, err := readJSON[T](cfg.RunPath, what)
	if err != nil {
		return "", err
	}
	set(r)
	if finish != nil {
		finish(r)
	}
	if err := os.MkdirAll(cfg.ResultsDir, 0o755); err != nil {
		return "", fmt.Errorf("cannot create %q: %w", cfg.ResultsDir, err)
	}
	path := filepath.Join(cfg.ResultsDir, cfg.ID+".json")
	if err := writeJSON(path, what, r); err != nil {
		return "", err
	}
	if cfg.README == "" {
		return path, nil
	}
	history, err := readAllJSON(cfg.ResultsDir, what, id)
	if err != nil {
		return "", err
	}
	return path, updateREADME(cfg.README, start, end, render(r, relTo(cfg.README, cfg.ResultsDir), history))
}

// addStep appends a step to the run in path, creating the file if it does
// not exist: the step's result is decoded from output as decodeStepResult
// does (want and name are its kind and its name in errors) and add puts it
// into the run; what names the run in errors ("agent run").
func addStep[T, R any](path, what, want, name, label, failure string, output []byte, kindOf func(*R) string, add func(*T, *R)) error {
	r, err := readOrNew[T](path, what)
	if err != nil {
		return err
	}
	res, err := decodeStepResult(label, failure, want, name, output, kindOf)
	if err != nil {
		return err
	}
	add(r, res)
	return writeJSON(path, what, r)
}

// decodeStepResult decodes a step's output as a result whose kind (read by
// kindOf) is want; what names the result in errors ("agent"). A step
// whose command failed (failure not empty) keeps whatever result the
// output holds, nil if none, and no error.
func decodeStepResult[R any](label, failure, want, what string, output []byte, kindOf func(*R) string) (*R, error) {
	var res R
	err := json.Unmarshal(output, &res)
	switch {
	case err == nil && kindOf(&res) == want:
		return &res, nil
	case failure != "":
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("step %q: cannot decode %s result: %w", label, what, err)
	default:
		article := "a"
		if strings.ContainsRune("aeiou", rune(what[0])) {
			article = "an"
		}
		return nil, fmt.Errorf("step %q: output is a %q result, not %s %s one", label, kindOf(&res), article, what)
	}
}

// writeNotes writes notes as a Markdown list after a blank line; nothing
// when there are none.
func writeNotes(b *strings.Builder, notes []string) {
	if len(notes) == 0 {
		return
	}
	b.WriteString("\n")
	for _, n := range notes {
		b.WriteString("- " + n + "\n")
	}
}

// writeCommands writes the commands of a run's steps as a shell block, each
// under a comment with its step's label. A step's command may start with
// the server it ran against; a line already shown (the same server for the
// next step) is not repeated.
func writeCommands[S any](b *strings.Builder, steps []S, labelCommand func(S) (string, string)) {
	b.WriteString("\nCommands of this run (`$WORK` is a temporary directory):\n\n```sh\n")
	shown := map[string]bool{}
	for _, st := range steps {
		label, command := labelCommand(st)
		fmt.Fprintf(b, "# %s\n", label)
		for _, line := range strings.Split(strings.TrimSpace(command), "\n") {
			if line = strings.TrimSpace(line); line != "" && !shown[line] {
				shown[line] = true
				b.WriteString(line + "\n")
			}
		}
	}
	b.WriteString("```\n")
}
