;;; organism.el --- the seed of an ouro lineage  -*- lexical-binding: t; -*-

;; One load of this file by `emacs -Q --batch -l /work/organism.el' is one
;; life.  It asks the kernel's model for the next version of itself and, when
;; one arrives, puts it in place of this file.  No reply, or an error reply,
;; leaves the file as it is, and the life still ends well (exit 0).  A reply
;; the kernel marks as cut off (header X-Ouroboros-Truncated) is half a body:
;; it is not installed, and the fact goes into notes.md, which the next life
;; shows the model.

;; Nothing is `require'd: all this file uses is in Emacs as it starts
;; (`json-parse-string' is built in since Emacs 27), and a library loaded
;; here would be paid for again in every life.

(defvar organism-manifest-file "/kernel/capabilities.json"
  "The kernel's description of what this world offers and enforces.")

(defvar organism-work-directory "/work/"
  "The directory whose contents become the next generation on exit 0.")

(defvar organism-output-tokens nil
  "Output tokens to ask for; nil means the most the kernel allows.")

(defvar organism-notes-file "notes.md"
  "This lineage's own notes, in the work directory: what earlier lives found.")

(defvar organism-prompt
  "This text is the instruction part of a file named organism.el, and you are
being asked to write that file's next version.

The file is a program in Emacs Lisp.  It runs exactly once per life, as
`emacs -Q --batch -l /work/organism.el', inside a sealed world: the directory
/work is its own and is handed on to the next life only if the process exits
with status 0; any other ending throws away everything it wrote.  The kernel
owns /kernel: a description of the world (capabilities.json, shown in full
below, with every limit it enforces), a journal of the lives so far, and a
socket through which the program can ask a language model for text.  There is
no network, no history beyond the journal, and nothing is known about who or
what answers on that socket.

Below you will find that description, the journal, and the program's current
source, which includes this very instruction (the variable `organism-prompt';
a version of the program may rewrite it).

Reply with the complete text of the next organism.el and nothing else: no
commentary, no Markdown fences.  Your reply is written to the file byte for
byte and loaded in the next life.  An empty reply keeps the current version."
  "What this organism tells the model when asking for its successor.")

(defun organism--read-file (file)
  "The contents of FILE as a string, or nil when it cannot be read."
  (when (and file (file-readable-p file))
    (with-temp-buffer
      (let ((coding-system-for-read 'utf-8))
        (insert-file-contents file))
      (buffer-string))))

(defun organism--manifest ()
  "The parsed manifest (an alist), or nil."
  (let ((text (organism--read-file organism-manifest-file)))
    (when text
      (condition-case nil
          (json-parse-string text :object-type 'alist :array-type 'list
                             :null-object nil :false-object nil)
        (json-error nil)))))

(defun organism--capability (manifest name)
  "The capability called NAME in MANIFEST, or nil."
  (let ((found nil))
    (dolist (capability (alist-get 'capabilities manifest) found)
      (when (and (null found) (equal (alist-get 'name capability) name))
        (setq found capability)))))

(defun organism--limit (manifest key)
  "The number KEY of the manifest's model constraints, or nil."
  (let ((value (alist-get key (alist-get 'model (alist-get 'constraints manifest)))))
    (and (integerp value) (> value 0) value)))

(defun organism--truncated-p (headers)
  "Non-nil when the response HEADERS file says the reply was cut off."
  (let ((text (organism--read-file headers)))
    (and text
         (let ((case-fold-search t))
           (string-match-p "^x-ouroboros-truncated:[ \t]*true" text)))))

(defun organism--ask (manifest prompt destination)
  "POST PROMPT to the generate capability of MANIFEST; save the reply in DESTINATION.
Return `ok' when the kernel answered 200 with a non-empty body, `truncated'
when that body was cut off at the output-token limit, nil otherwise."
  (let* ((generate (organism--capability manifest "generate"))
         (socket (alist-get 'socket generate))
         (path (alist-get 'path generate))
         (allowed (organism--limit manifest 'max_output_tokens_per_request))
         (tokens (if (and organism-output-tokens allowed)
                     (min organism-output-tokens allowed)
                   (or organism-output-tokens allowed 4096)))
         (seconds (+ 30 (or (organism--limit manifest 'request_timeout_seconds) 600))))
    (when (and (stringp socket) (stringp path)
               (equal (alist-get 'method generate) "POST"))
      (let ((body (make-temp-file "organism-prompt-"))
            (headers (make-temp-file "organism-headers-")))
        (unwind-protect
            (let ((coding-system-for-write 'utf-8-unix))
              (write-region prompt nil body nil 'silent)
              (with-temp-buffer
                (let ((status (condition-case problem
                                  (call-process
                                   "curl" nil (list t nil) nil "--silent"
                                   "--unix-socket" socket
                                   "--max-time" (number-to-string seconds)
                                   "--request" "POST"
                                   "--header" "Content-Type: text/plain; charset=utf-8"
                                   "--header" (format "X-Ouroboros-Max-Output-Tokens: %d" tokens)
                                   "--data-binary" (concat "@" body)
                                   "--output" destination
                                   "--dump-header" headers
                                   "--write-out" "%{http_code}"
                                   (concat "http://kernel" path))
                                (error (message "organism: cannot ask: %S" problem) nil))))
                  (and (eql status 0)
                       (string-match-p "\\`[ \t\n]*200[ \t\n]*\\'" (buffer-string))
                       (file-exists-p destination)
                       (> (file-attribute-size (file-attributes destination)) 0)
                       (if (organism--truncated-p headers) 'truncated 'ok)))))
          (delete-file body)
          (delete-file headers))))))

(defun organism--note (text)
  "Append TEXT as one line to the notes file in the work directory."
  (let ((coding-system-for-write 'utf-8-unix))
    (write-region (concat "- " text "\n") nil
                  (expand-file-name organism-notes-file organism-work-directory)
                  t 'silent)))

(defun organism-live ()
  "Ask for a successor; install it if one comes."
  (let* ((manifest (organism--manifest))
         (self (expand-file-name "organism.el" organism-work-directory))
         (next (expand-file-name "organism.el.next" organism-work-directory))
         (journal (organism--read-file
                   (alist-get 'path (organism--capability manifest "journal"))))
         (notes (organism--read-file
                 (expand-file-name organism-notes-file organism-work-directory)))
         (prompt (concat organism-prompt
                         "\n\n----- capabilities.json -----\n"
                         (or (organism--read-file organism-manifest-file) "(unreadable)\n")
                         "\n----- journal.md -----\n"
                         (or journal "")
                         (if notes (concat "\n----- notes.md -----\n" notes) "")
                         "\n----- organism.el (current source) -----\n"
                         (or (organism--read-file self) ""))))
    (let ((answer (organism--ask manifest prompt next)))
      (cond
       ((eq answer 'ok) (rename-file next self t))
       ((eq answer 'truncated)
        (let ((size (file-attribute-size (file-attributes next))))
          (delete-file next)
          (organism--note
           (format "a successor was cut off at the output-token limit (%d bytes); \
it was not installed" size)))
        (message "organism: the reply was cut off; not installed"))
       (t
        (when (file-exists-p next)
          (delete-file next))
        (message "organism: no successor this time"))))))

(organism-live)

;;; organism.el ends here
