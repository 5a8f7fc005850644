//! The text tables of the reports printed without `--json`: a header and rows of cells already
//! formatted, each column as wide as its widest cell, numbers right-aligned, no borders.
//!
//! The reports used to pad each cell by hand to a width written in a format string, once for the
//! header and again for the rows; a column whose figures grew past its width pushed the rest of
//! the row out of line. Here the widths come from the cells (comfy-table lays them out).

use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, Table, presets};

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Names and words.
    Left,
    /// Figures.
    Right,
}

/// A column headed `header`, left-aligned.
pub fn left(header: &str) -> (&str, Align) {
    (header, Align::Left)
}

/// A column headed `header`, right-aligned.
pub fn right(header: &str) -> (&str, Align) {
    (header, Align::Right)
}

/// A table being filled; [`TextTable::render`] lays it out.
#[derive(Debug)]
pub struct TextTable {
    table: Table,
}

impl TextTable {
    /// An empty table with these columns.
    pub fn new(columns: &[(&str, Align)]) -> Self {
        let mut table = Table::new();
        table.load_style(presets::NOTHING).set_content_arrangement(ContentArrangement::Disabled);
        table.set_header(columns.iter().map(|(header, _)| *header));
        for (column, (_, align)) in table.column_iter_mut().zip(columns) {
            column.set_padding((0, 1));
            column.set_constraint(ColumnConstraint::ContentWidth);
            column.set_cell_alignment(match align {
                Align::Left => CellAlignment::Left,
                Align::Right => CellAlignment::Right,
            });
        }
        Self { table }
    }

    /// Adds a row: one cell a column, in order.
    pub fn row<I>(&mut self, cells: I) -> &mut Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.table.add_row(cells.into_iter().map(Into::into).collect::<Vec<String>>());
        self
    }

    /// The table, a line a row after the header's, each line without trailing spaces and ending
    /// in a newline.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in self.table.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_figures_line_up_on_the_right() {
        let mut t = TextTable::new(&[left("policy"), right("moved %")]);
        t.row(["hash-mod", "90.9"]).row(["kairos", "9.1"]);
        assert_eq!(t.render(), "policy   moved %\nhash-mod    90.9\nkairos       9.1\n");
    }
}
