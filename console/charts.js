// Charts drawn by hand as SVG (createElementNS through dom.svg, text as text
// nodes). Each one writes its labels and its numbers beside the marks, so it
// reads without colour and without seeing the marks at all; each is a
// figure with a caption, and the SVG is an image whose accessible name and
// description say what it shows.
import {el, svg, uid} from './dom.js';

const FONT_PX = 13;

function figure(caption, description, node, id) {
  const capId = uid('chart');
  const descId = uid('chart-desc');
  node.setAttribute('role', 'img');
  node.setAttribute('aria-labelledby', `${capId} ${descId}`);
  node.prepend(svg('desc', {id: descId}, description));
  return el('figure', {class: 'chart', id},
    el('figcaption', {id: capId}, caption),
    node);
}

// Horizontal bars: [[label, value, text]] (text: how the value is written;
// the value itself when absent). Zero draws no bar but keeps its row.
export function barChart(caption, entries, {id} = {}) {
  const labelW = 110;
  const numW = 90;
  const barW = 260;
  const rowH = 26;
  const width = labelW + barW + numW;
  const height = entries.length * rowH + 4;
  const max = Math.max(1, ...entries.map(([, v]) => Number(v || 0)));
  const root = svg('svg', {viewBox: `0 0 ${width} ${height}`, class: 'chart-svg', width, height});
  entries.forEach(([label, v, text], i) => {
    const n = Number(v || 0);
    const y = i * rowH + 2;
    const w = n > 0 ? Math.max(2, Math.round((n / max) * barW)) : 0;
    root.append(
      svg('text', {x: 0, y: y + rowH / 2 + FONT_PX / 3, class: 'chart-label'}, label),
      svg('rect', {x: labelW, y: y + 5, width: w, height: rowH - 10, rx: 3, class: 'chart-bar'}),
      svg('text', {x: labelW + w + 6, y: y + rowH / 2 + FONT_PX / 3, class: 'chart-num'}, text ?? n.toLocaleString()));
  });
  const description = entries.map(([label, v, text]) => `${label}: ${text ?? Number(v || 0).toLocaleString()}`).join('; ');
  return figure(caption, description, root, id);
}

// Columns over time: points [{label, value, text}] oldest first, each column
// with its value written above it and its label below; a line joins the
// tops when line is true (a trend), else the columns stand alone (counts).
export function timeChart(caption, points, {id, line = false} = {}) {
  const colW = 64;
  const top = 22;
  const plotH = 140;
  const bottom = 24;
  const width = Math.max(1, points.length) * colW;
  const height = top + plotH + bottom;
  const max = Math.max(1, ...points.map((p) => Math.abs(Number(p.value || 0))));
  const root = svg('svg', {viewBox: `0 0 ${width} ${height}`, class: 'chart-svg', width, height});
  root.append(svg('line', {x1: 0, y1: top + plotH, x2: width, y2: top + plotH, class: 'chart-axis'}));
  const tops = [];
  points.forEach((p, i) => {
    const n = Math.abs(Number(p.value || 0));
    const h = n > 0 ? Math.max(2, Math.round((n / max) * plotH)) : 0;
    const x = i * colW;
    const cx = x + colW / 2;
    tops.push([cx, top + plotH - h]);
    if (!line) root.append(svg('rect', {x: x + 12, y: top + plotH - h, width: colW - 24, height: h, rx: 2, class: 'chart-bar'}));
    root.append(
      svg('text', {x: cx, y: top + plotH - h - 6, 'text-anchor': 'middle', class: 'chart-num'}, p.text ?? n.toLocaleString()),
      svg('text', {x: cx, y: top + plotH + 17, 'text-anchor': 'middle', class: 'chart-label'}, p.label));
  });
  if (line && tops.length > 0) {
    root.append(svg('polyline', {points: tops.map(([x, y]) => `${x},${y}`).join(' '), class: 'chart-line'}));
    for (const [x, y] of tops) root.append(svg('circle', {cx: x, cy: y, r: 4, class: 'chart-point'}));
  }
  const description = points.map((p) => `${p.label}: ${p.text ?? Number(p.value || 0).toLocaleString()}`).join('; ');
  return figure(caption, description || 'no data', root, id);
}
