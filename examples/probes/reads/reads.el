;;; reads.el --- probe: does organism.el read and byte-compile cleanly?  -*- lexical-binding: t; -*-

;; An ouro probe (docs/spec.md, "spec.probes"): run in a sandbox on one
;; generation's committed tree, at /work, with this folder read-only at /probe:
;;   emacs -Q --batch -l /probe/reads.el
;; It never loads organism.el (loading it would live a life); it reads every
;; top-level form and byte-compiles the file.  stdout is one JSON object:
;;   {"reads": bool, "forms": N, "compiles": bool, "warnings": N}

(require 'json)

(defun reads-forms (file)
  "(READ-OK . FORMS) of FILE: every top-level form read, and how many."
  (with-temp-buffer
    (insert-file-contents file)
    (set-syntax-table emacs-lisp-mode-syntax-table)  ; `;' starts a comment
    (goto-char (point-min))
    (let ((forms 0))
      (condition-case nil
          (progn
            (while (progn (forward-comment (buffer-size)) (not (eobp)))
              (read (current-buffer))  ; an unfinished form signals end-of-file here
              (setq forms (1+ forms)))
            (cons t forms))
        (error (cons nil forms))))))

(let* ((file "/work/organism.el")
       (read-result (if (file-exists-p file) (reads-forms file) (cons nil 0)))
       (warnings 0)
       (compiles nil))
  (when (car read-result)
    (let ((byte-compile-log-warning-function
           (lambda (&rest _) (setq warnings (1+ warnings)))))
      (setq compiles (condition-case nil
                         (byte-compile-file file)
                       (error nil)))))
  (princ (json-encode `((reads . ,(if (car read-result) t :json-false))
                        (forms . ,(cdr read-result))
                        (compiles . ,(if compiles t :json-false))
                        (warnings . ,warnings)))))
