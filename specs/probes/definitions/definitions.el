;;; definitions.el --- probe: how many top-level definitions organism.el has  -*- lexical-binding: t; -*-

;; An ouro probe (docs/spec.md, "spec.probes"): run in a sandbox on one
;; generation's committed tree, at /work, with this folder read-only at /probe:
;;   emacs -Q --batch -l /probe/definitions.el
;; It reads organism.el's top-level forms without evaluating them.  stdout is
;; one JSON object:
;;   {"forms": N, "definitions": N, "functions": N, "variables": N, "bytes": N}
;; A body that does not read is a probe failure (Emacs exits non-zero).

(require 'json)

(let ((forms 0) (functions 0) (variables 0)
      (file "/work/organism.el"))
  (with-temp-buffer
    (insert-file-contents file)
    (set-syntax-table emacs-lisp-mode-syntax-table)  ; `;' starts a comment
    (goto-char (point-min))
    ;; an unfinished form signals end-of-file: Emacs exits non-zero, a probe failure
    (while (progn (forward-comment (buffer-size)) (not (eobp)))
      (let ((form (read (current-buffer))))
        (setq forms (1+ forms))
        (when (consp form)
          (cond ((memq (car form) '(defun defmacro defsubst cl-defun cl-defmacro
                                    define-inline))
                 (setq functions (1+ functions)))
                ((memq (car form) '(defvar defconst defcustom defvar-local))
                 (setq variables (1+ variables))))))))
  (princ (json-encode `((forms . ,forms)
                        (definitions . ,(+ functions variables))
                        (functions . ,functions)
                        (variables . ,variables)
                        (bytes . ,(file-attribute-size (file-attributes file)))))))
