// The inspector's only script: the live page's change feed (server-sent events). Every value from the
// store is put into the page as text (textContent), never as HTML.
"use strict";

function cell(row, text, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  td.textContent = text;
  row.appendChild(td);
  return td;
}

// Control, format (bidi overrides, zero-width) and line-separator characters but newline and tab are shown as
// visible \uXXXX marks, as the server-rendered pages show them, instead of acting on the page.
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Cn}]/u;

function visible(parent, text) {
  let plain = "";
  for (const ch of text) {
    if (ch !== "\n" && ch !== "\t" && HIDDEN.test(ch)) {
      parent.appendChild(document.createTextNode(plain));
      plain = "";
      const code = ch.codePointAt(0);
      const mark = document.createElement("span");
      mark.className = "esc";
      mark.title = "U+" + code.toString(16).toUpperCase().padStart(4, "0");
      mark.textContent = code <= 0xffff ? "\\u" + code.toString(16).padStart(4, "0") : "\\U" + code.toString(16).padStart(8, "0");
      parent.appendChild(mark);
    } else {
      plain += ch;
    }
  }
  parent.appendChild(document.createTextNode(plain));
}

function shorten(text, limit) {
  return text.length > limit ? text.slice(0, limit) + "…" : text;
}

function startLive(table) {
  const state = document.getElementById("live-state");
  const body = table.tBodies[0];
  const source = new EventSource(table.dataset.stream);
  source.addEventListener("open", () => {
    state.textContent = "connected";
    document.body.dataset.live = "open";
  });
  source.addEventListener("error", () => {
    state.textContent = "reconnecting";
    document.body.dataset.live = "closed";
  });
  source.addEventListener("change", (message) => {
    const change = JSON.parse(message.data);
    const row = document.createElement("tr");
    row.className = "fresh";
    row.dataset.id = change.fact_id;
    const moment = document.createElement("time");
    moment.textContent = change.when;
    cell(row, "").appendChild(moment);
    cell(row, change.scope);
    cell(row, change.event);
    visible(cell(row, ""), change.actor);
    const link = document.createElement("a");
    link.href = "/fact/" + encodeURIComponent(change.fact_id);
    const code = document.createElement("code");
    code.textContent = change.fact_id;
    link.appendChild(code);
    cell(row, "").appendChild(link);
    visible(cell(row, "", "text"), change.content === null ? "-" : shorten(change.content, 240));
    body.insertBefore(row, body.firstChild);
    while (body.rows.length > 500) body.deleteRow(body.rows.length - 1);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const table = document.getElementById("changes");
  if (table && table.dataset.stream) startLive(table);
});
