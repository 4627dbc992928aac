package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/dedup-go/dedup/tools/internal/repo"
)

// commandCommit makes the commit a command module m is tagged on: HEAD
// with m's go.mod stripped of its replace directives that point at
// directories of this repository, as a child of HEAD that no branch
// points at. go install PATH@VERSION refuses a module whose go.mod holds
// replace directives, while the repository's own builds and tests need
// them; the tag keeps the commit reachable once pushed. It returns the
// commit's hash and the replaces dropped.
func commandCommit(ctx context.Context, root string, m repo.Module, mods []repo.Module, v string) (string, []string, error) {
	data, err := repo.GitRaw(ctx, root, "show", "HEAD:"+m.ModFile())
	if err != nil {
		return "", nil, err
	}
	f, err := modfile.Parse(m.ModFile(), data, nil)
	if err != nil {
		return "", nil, err
	}
	var dropped []string
	for _, r := range f.Replace {
		if r.New.Version == "" && repo.Own(mods, r.Old.Path) {
			dropped = append(dropped, r.Old.Path)
		}
	}
	for _, p := range dropped {
		if err := f.DropReplace(p, ""); err != nil {
			return "", nil, err
		}
	}
	f.Cleanup()
	if len(f.Replace) > 0 {
		var left []string
		for _, r := range f.Replace {
			left = append(left, r.Old.Path)
		}
		return "", nil, fmt.Errorf("%s replaces %s, which go install would refuse", m.ModFile(), strings.Join(left, ", "))
	}
	stripped, err := f.Format()
	if err != nil {
		return "", nil, err
	}

	tmp, err := os.MkdirTemp("", "release-index-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(tmp)
	env := append(os.Environ(), "GIT_INDEX_FILE="+filepath.Join(tmp, "index"))
	git := func(stdin []byte, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = root
		cmd.Env = env
		cmd.Stdin = bytes.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
		}
		return strings.TrimSpace(out.String()), nil
	}
	blob, err := git(stripped, "hash-object", "-w", "--stdin")
	if err != nil {
		return "", nil, err
	}
	if _, err := git(nil, "read-tree", "HEAD"); err != nil {
		return "", nil, err
	}
	if _, err := git(nil, "update-index", "--cacheinfo", "100644,"+blob+","+m.ModFile()); err != nil {
		return "", nil, err
	}
	tree, err := git(nil, "write-tree")
	if err != nil {
		return "", nil, err
	}
	msg := fmt.Sprintf("release %s: %s without its replace directives, for go install", v, m.ModFile())
	sha, err := git(nil, "commit-tree", tree, "-p", "HEAD", "-m", msg)
	if err != nil {
		return "", nil, err
	}
	return sha, dropped, nil
}
