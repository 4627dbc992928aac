package testenv

import (
	"os/exec"
)

// lookPath finds a program on PATH, or in the sbin folders that Debian puts
// servers in and that a non-root PATH may lack.
func lookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/bin"} {
		if p, err2 := exec.LookPath(dir + "/" + name); err2 == nil {
			return p, nil
		}
	}
	return "", err
}
