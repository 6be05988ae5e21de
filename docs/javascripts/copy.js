// The copy button of a block that opens with a prompt copies what a person
// types: the commands after "$ ", or the Python after ">>> " and "... "
// (a bare "..." is the blank line that ends a block in the REPL), without the
// prompts or the output. Material copies an ancestor's data-copy when it has one.
function typedLines(text) {
  const lines = text.replace(/\n+$/, "").split("\n");
  const repl = lines[0].startsWith(">>> ");
  const prompt = repl ? /^(>>> |\.\.\. |\.\.\.$)/ : /^\$ /;
  const kept = [];
  for (const line of lines) {
    const continued = !repl && kept.length > 0 && kept[kept.length - 1].endsWith("\\");
    if (prompt.test(line) || continued) kept.push(line.replace(prompt, ""));
  }
  return kept.join("\n");
}

document$.subscribe(() => {
  for (const code of document.querySelectorAll("pre > code")) {
    const text = code.textContent.replace(/^\s+/, "");
    if (text.startsWith("$ ") || text.startsWith(">>> ")) {
      code.parentElement.setAttribute("data-copy", typedLines(text));
    }
  }
});
